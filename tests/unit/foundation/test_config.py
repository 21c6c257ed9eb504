from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import pytest

from opsctl import config as cfg
from opsctl.config import ConfigError, load_config, parse_config, register_section


def test_defaults_when_no_file(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("OPSCTL_CONFIG", raising=False)
    monkeypatch.setattr(cfg, "SYSTEM_CONFIG", tmp_path / "absent.toml")
    config = load_config()
    assert config.path is None
    assert config.slurm.backend == "auto"
    assert config.guardrails.max_drain_fraction == pytest.approx(0.10)
    assert config.guardrails.min_drain_nodes == 1
    assert config.prometheus.url.startswith("http://")


def test_search_order_explicit_then_env_then_system(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    explicit = tmp_path / "a.toml"
    explicit.write_text('[slurm]\npartition = "explicit"\n')
    env = tmp_path / "b.toml"
    env.write_text('[slurm]\npartition = "env"\n')
    system = tmp_path / "c.toml"
    system.write_text('[slurm]\npartition = "system"\n')
    monkeypatch.setattr(cfg, "SYSTEM_CONFIG", system)
    monkeypatch.setenv("OPSCTL_CONFIG", str(env))
    assert load_config(explicit).slurm.partition == "explicit"
    assert load_config().slurm.partition == "env"
    monkeypatch.delenv("OPSCTL_CONFIG")
    assert load_config().slurm.partition == "system"


def test_explicit_or_env_path_must_exist(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="not found"):
        load_config(tmp_path / "missing.toml")
    monkeypatch.setenv("OPSCTL_CONFIG", str(tmp_path / "missing.toml"))
    with pytest.raises(ConfigError, match="OPSCTL_CONFIG"):
        load_config()


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("[slurm]\nbackend = 'slurmrestd'\n", "slurm.backend"),
        ("[slurm]\nbackendd = 'cli'\n", "unknown key slurm.backendd"),
        ("[nope]\nx = 1\n", r"unknown section \[nope\]"),
        ("[guardrails]\nmax_drain_fraction = 1.5\n", "guardrails.max_drain_fraction"),
        ("[guardrails]\nmax_drain_fraction = 'ten'\n", "guardrails.max_drain_fraction: expected a number"),
        ("[guardrails]\nmin_drain_nodes = 1.5\n", "guardrails.min_drain_nodes: expected an integer"),
        ("[guardrails]\nmin_drain_nodes = true\n", "guardrails.min_drain_nodes: expected an integer"),
        ("[slurm]\ncommand_timeout = -1\n", "slurm.command_timeout"),
        ("[prometheus]\nurl = 'localhost:9090'\n", "prometheus.url"),
        ("slurm = 3\n", r"\[slurm\] must be a table"),
        ("[slurm\n", "invalid TOML"),
    ],
)
def test_bad_config_names_the_key(text: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        parse_config(text, Path("/etc/opsctl/opsctl.toml"))


def test_paths_resolve_against_the_config_file(tmp_path: Path) -> None:
    path = tmp_path / "conf" / "opsctl.toml"
    path.parent.mkdir()
    config = parse_config('[slurm]\nslurm_conf = "slurm.conf"\n[audit]\nlog = "../audit.jsonl"\n', path)
    assert config.slurm.slurm_conf == str(tmp_path / "conf" / "slurm.conf")
    assert config.audit.log == str(tmp_path / "audit.jsonl")


def test_ints_are_accepted_for_floats() -> None:
    config = parse_config("[guardrails]\nmax_drain_fraction = 0\n[slurm]\ncommand_timeout = 5\n")
    assert config.guardrails.max_drain_fraction == 0.0
    assert isinstance(config.slurm.command_timeout, float)


@dataclass
class _ExampleSection:
    hosts: list[str] = field(default_factory=list)
    port: int = 22
    key: str | None = None

    def validate(self) -> None:
        if not 0 < self.port < 65536:
            raise ValueError(f"port: out of range ({self.port})")


def test_other_areas_register_their_sections(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(cfg.SECTIONS, "example", _ExampleSection)
    config = parse_config('[example]\nhosts = ["a", "b"]\nport = 2222\n')
    section = config.section("example", _ExampleSection)
    assert section.hosts == ["a", "b"] and section.port == 2222 and section.key is None
    with pytest.raises(ConfigError, match=r"example\.port: out of range"):
        parse_config("[example]\nport = 0\n")
    with pytest.raises(ConfigError, match=r"example.hosts: expected a string, got an integer"):
        parse_config("[example]\nhosts = [1]\n")
    # Absent sections still give defaults.
    assert parse_config("").section("example", _ExampleSection).port == 22


def test_register_section_rejects_non_dataclasses(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cfg, "SECTIONS", dict(cfg.SECTIONS))
    with pytest.raises(TypeError):
        register_section("bad", int)
