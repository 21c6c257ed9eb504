"""The configuration reference is the code's: docs/reference/*.md are what `opsctl config reference`
writes now (run `make reference` after changing a section), every opsctl.toml key says what it
means, every default is a value its key accepts, and every declared limit is enforced by the loader
at its bounds."""

from __future__ import annotations

import dataclasses
import typing
from pathlib import Path
from typing import Any

import pytest

from opsctl.config import SECTIONS, ConfigError, check_limits, parse_config, section_class
from opsctl.reference import default_of, job_toml_reference, key_docs, opsctl_toml_reference

REPO = Path(__file__).resolve().parents[3]
SECTION_NAMES = sorted(SECTIONS)


@pytest.mark.parametrize(
    ("page", "render"),
    [("opsctl-toml.md", opsctl_toml_reference), ("job-toml.md", job_toml_reference)],
)
def test_the_committed_reference_is_what_the_code_writes(page: str, render: typing.Callable[[], str]) -> None:
    committed = (REPO / "docs" / "reference" / page).read_text(encoding="utf-8")
    assert committed == render(), f"docs/reference/{page} is stale: run `make reference`"


@pytest.mark.parametrize("name", SECTION_NAMES)
def test_every_key_says_what_it_means(name: str) -> None:
    silent = [d.key for d in key_docs(section_class(name), lambda f: "") if not d.meaning]
    assert not silent, f"[{name}]: no comment on or above {silent} in the section's dataclass"


def _fields(name: str) -> list[dataclasses.Field[Any]]:
    return list(dataclasses.fields(section_class(name)))


@pytest.mark.parametrize("name", SECTION_NAMES)
def test_every_default_is_accepted_by_its_own_limits(name: str) -> None:
    for f in _fields(name):
        assert check_limits(default_of(f), f.metadata) is None, f"{name}.{f.name}"
    defaults = section_class(name)()
    if hasattr(defaults, "validate"):
        defaults.validate()  # the cross-key checks accept the defaults too


def _outside_and_inside(meta: typing.Mapping[str, Any], kind: type) -> list[tuple[Any, bool]]:
    """(value, accepted) pairs at and just past each declared bound."""
    if "choices" in meta:
        return [(meta["choices"][0], True), ("not-" + meta["choices"][0], False)]
    step = 1 if kind is int else 0.001
    cases: list[tuple[Any, bool]] = []
    if "ge" in meta:
        cases += [(meta["ge"], True), (meta["ge"] - step, False)]
    if "gt" in meta:
        cases += [(meta["gt"], False), (meta["gt"] + step, True)]
    if "le" in meta:
        cases += [(meta["le"], True), (meta["le"] + step, False)]
    return [(kind(v) if not isinstance(v, str) else v, ok) for v, ok in cases]


def _toml(value: Any) -> str:
    return f'"{value}"' if isinstance(value, str) else repr(value)


LIMITED = [
    (name, f.name)
    for name in SECTION_NAMES
    for f in dataclasses.fields(section_class(name))
    if set(f.metadata) - {"path"}
]


def test_some_keys_declare_limits() -> None:
    assert len(LIMITED) >= 10


@pytest.mark.parametrize(("name", "key"), LIMITED)
def test_a_declared_limit_is_enforced_at_its_bounds(name: str, key: str) -> None:
    f = next(f for f in _fields(name) if f.name == key)
    kind = typing.get_type_hints(section_class(name))[key]
    kind = next((a for a in typing.get_args(kind) if a is not type(None)), kind)
    for value, accepted in _outside_and_inside(f.metadata, kind):
        text = f"[{name}]\n{key} = {_toml(value)}\n"
        if accepted:
            parse_config(text)
        else:
            with pytest.raises(ConfigError, match=rf"{name}\.{key}: must be "):
                parse_config(text)


VALIDATED = [(name, key) for name, key in LIMITED if hasattr(section_class(name), "validate")]


@pytest.mark.parametrize(("name", "key"), VALIDATED)
def test_a_section_built_in_code_is_held_to_the_same_limits(name: str, key: str) -> None:
    """validate() of a section made by code (a CLI option, a test, the simulator) rejects what the
    loader would, naming the key."""
    cls = section_class(name)
    f = next(f for f in _fields(name) if f.name == key)
    kind = typing.get_type_hints(cls)[key]
    kind = next((a for a in typing.get_args(kind) if a is not type(None)), kind)
    for value, accepted in _outside_and_inside(f.metadata, kind):
        if not accepted:
            with pytest.raises(ValueError, match=rf"^{key}: must be "):
                cls(**{key: value}).validate()
