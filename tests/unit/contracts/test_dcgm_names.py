"""Every DCGM name opsctl reads, the alert rules query and the dashboards draw, every field of the
counters file the dcgm role renders and every field the simulator serves exists in what the real
tools define, for each DCGM release the role supports (upstream_contract.DCGM_VERSIONS):

- DCGM's own field table (dcgmlib/dcgm_fields.h at the release's tag): the host engine knows it;
- the go-dcgm table of the dcgm-exporter built for that DCGM (the commit its go.mod pins): the
  exporter accepts the name in its counters file and watches the field id DCGM has for it (an
  unknown name stops the exporter; a different id would read another field);
- dcgm-exporter's own collectors for the DCGM_EXP_* names.

The tables are extracted from the upstream repositories by scripts/extract_dcgm_fields.py; never
from the product's own lists.
"""

from __future__ import annotations

import csv
import importlib.util
import io

import pytest
import yaml
from upstream_contract import (
    DCGM_VERSIONS,
    EXPORTER_RELEASES,
    REAL_WORLD,
    REPO,
    FieldTable,
    conflicting_ids,
    dcgm_table,
    default_counters,
    exporter_for,
    exporter_names,
    go_dcgm_table,
    queried,
    render_dcgm_counters,
    render_dcgm_counters_text,
    unknown_dcgm,
)

from opsctl.hwsim.dcgm_exporter import RELEASE_FOR_DCGM_MAJOR, release_for
from opsctl.hwsim.metrics import EVERY_FIELD_CSV, KNOWN, dcgm_families, parse_collectors
from opsctl.hwsim.state import make_node

VERSIONS = sorted(DCGM_VERSIONS)
# Queried on purpose though a supported DCGM lacks the name: the source reads each spelling the
# field has (opsctl/evidence/prometheus.py GAUGES), or the field is newer than that DCGM.
NOT_IN_EVERY_DCGM = {
    "DCGM_FI_DEV_CLOCKS_EVENT_REASONS": "field 112 under its DCGM 4 name; DCGM 3 has only "
    "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS, which is queried too",
    "DCGM_FI_DEV_GET_GPU_RECOVERY_ACTION": "field 1523 appeared in DCGM 4.5 (3.x has no recovery "
    "action); 4.6 renamed it and keeps this spelling as a deprecated alias",
    "DCGM_FI_DEV_GPU_RECOVERY_ACTION": "field 1523 under its DCGM 4.6 name; 4.5 has only "
    "DCGM_FI_DEV_GET_GPU_RECOVERY_ACTION, which is queried too",
}


def dcgm_names(names: dict[str, set[str]]) -> set[str]:
    return {n for n in names if n.startswith("DCGM_")}


def all_tables() -> list[FieldTable]:
    return [dcgm_table(v) for v in VERSIONS] + [go_dcgm_table(v) for v in VERSIONS]


def role_counters() -> list[list[str]]:
    defaults = yaml.safe_load((REPO / "roles/dcgm/defaults/main.yml").read_text())
    return [[str(c) for c in row] for row in defaults["dcgm_exporter_counters"]]


def test_the_supported_releases_are_the_ones_the_product_pins_and_simulates() -> None:
    pinned = yaml.safe_load((REPO / "inventory/production/group_vars/all/versions.yml").read_text())
    assert DCGM_VERSIONS[pinned["dcgm_version"]] == pinned["dcgm_exporter_version"]
    for version, release in DCGM_VERSIONS.items():
        assert release is None or release.startswith(version + "-")  # the validate play's rule
    assert set(RELEASE_FOR_DCGM_MAJOR.values()) <= set(EXPORTER_RELEASES)
    for version, table in ((v, dcgm_table(v)) for v in VERSIONS):
        assert (table.upstream, table.rev, table.path) == (
            "NVIDIA/DCGM",
            f"v{version}",
            "dcgmlib/dcgm_fields.h",
        )


def test_every_version_requirement_of_the_role_is_checked_against_some_release() -> None:
    # a row the role renders for no supported release would never meet an upstream table
    rendered = {v: render_dcgm_counters(v) for v in VERSIONS}
    for row in role_counters():
        on = [v for v in VERSIONS if row[0] in rendered[v]]
        assert on, f"{row[0]} ({row[3] if len(row) > 3 else 'any DCGM'}) is rendered for no supported DCGM"
        if len(row) > 3:
            assert len(on) < len(VERSIONS), f"{row[0]}: requirement {row[3]} excludes no supported DCGM"


@pytest.mark.parametrize("version", VERSIONS)
def test_every_dcgm_field_opsctl_queries_is_defined_by_the_dcgm(version: str) -> None:
    names = queried()
    assert sum(n.startswith("DCGM_FI_") for n in names) >= 15  # source, rules and dashboards were read
    for table in (dcgm_table(version), go_dcgm_table(version)):
        missing = unknown_dcgm(names, table, "DCGM_FI_")
        unlisted = {n: w for n, w in missing.items() if n not in NOT_IN_EVERY_DCGM}
        assert unlisted == {}, f"not in {table.fixture} (DCGM {version}): {unlisted}"


def test_names_some_supported_dcgm_lacks_are_listed_and_read_under_each_spelling() -> None:
    names = queried()
    for name, reason in NOT_IN_EVERY_DCGM.items():
        assert name in names, f"{name} is listed but nothing queries it any more"
        lacking = [v for v in VERSIONS if name not in dcgm_table(v)]
        having = [v for v in VERSIONS if name in dcgm_table(v)]
        assert lacking and having, f"{name}: listed ({reason}) but defined by {having or 'no'} supported DCGM"
        (ident,) = {dcgm_table(v).ids[name] for v in having}
        for v in lacking:
            # where this spelling is missing, the field is either unknown to that DCGM or queried
            # under the name that DCGM gives it
            others = [n for n in dcgm_names(names) if dcgm_table(v).ids.get(n) == ident]
            assert others or ident not in dcgm_table(v).ids.values(), (name, v, ident)


@pytest.mark.parametrize("release", EXPORTER_RELEASES)
def test_exporter_names_opsctl_queries_are_dcgm_exporters_own(release: str) -> None:
    names = queried()
    assert any(n.startswith("DCGM_EXP_") for n in names)
    missing = unknown_dcgm(names, exporter_names(release), "DCGM_EXP_")
    assert missing == {}, f"not a collector of dcgm-exporter {release}: {missing}"


@pytest.mark.parametrize("version", VERSIONS)
def test_the_roles_counters_file_names_only_fields_of_its_dcgm(version: str) -> None:
    rendered = {n: {"dcgm role counters"} for n in render_dcgm_counters(version)}
    assert len(rendered) >= 25
    assert unknown_dcgm(rendered, dcgm_table(version), "DCGM_FI_") == {}
    assert unknown_dcgm(rendered, go_dcgm_table(version), "DCGM_FI_") == {}
    assert unknown_dcgm(rendered, exporter_names(exporter_for(version)), "DCGM_EXP_") == {}
    assert set(rendered) == {n for n in rendered if n.startswith(("DCGM_FI_", "DCGM_EXP_"))}
    # the exporter watches the id go-dcgm gives the name: it must be the id DCGM has for it
    pair = (dcgm_table(version), go_dcgm_table(version))
    assert conflicting_ids([n for n in rendered if n.startswith("DCGM_FI_")], pair) == {}


def test_a_field_has_one_id_in_every_release_and_table() -> None:
    names = dcgm_names(queried()) | set(KNOWN)
    for v in VERSIONS:
        names |= set(render_dcgm_counters(v))
    assert conflicting_ids(names, all_tables()) == {}


def test_field_1523_under_each_releases_name() -> None:
    old, new = "DCGM_FI_DEV_GET_GPU_RECOVERY_ACTION", "DCGM_FI_DEV_GPU_RECOVERY_ACTION"
    assert 1523 not in dcgm_table("3.3.9").ids.values()
    assert dcgm_table("4.5.3").canonical(old) and new not in dcgm_table("4.5.3")
    assert dcgm_table("4.6.0").canonical(new) and dcgm_table("4.6.0").aliases[old] == new
    assert render_dcgm_counters("4.5.3").keys() & {old, new} == {old}
    assert render_dcgm_counters("4.6.0").keys() & {old, new} == {new}
    # dcgm-exporter 4.5.3-4.8.2's go-dcgm does not know the 4.6 name: the 4.6 counters file needs
    # an exporter built for DCGM 4.6, as the validate play demands
    assert old in go_dcgm_table("4.5.3") and new not in go_dcgm_table("4.5.3")
    assert go_dcgm_table("4.6.0").canonical(new) and old in go_dcgm_table("4.6.0").legacy


@pytest.mark.parametrize("version", VERSIONS)
def test_the_simulator_serves_only_fields_of_the_dcgm_it_plays(version: str) -> None:
    # the simulated cluster serves the role's counters file for its DCGM as the exporter release
    # release_for(version) would; every family and label field must exist in that DCGM's table and
    # be accepted by that release, so no test passes on a name the real exporter lacks
    counters = parse_collectors(render_dcgm_counters_text(version))
    families = dcgm_families(make_node("gpu-001", now=1_700_000_000.0), counters, now=1_700_000_000.0)
    served = {f.name: {"simulator"} for f in families} | {
        c.field: {"label"} for c in counters if c.type == "label"
    }
    assert set(served) == set(render_dcgm_counters(version))  # it serves the whole file
    release = release_for(version)
    assert unknown_dcgm(served, dcgm_table(version), "DCGM_FI_") == {}
    assert unknown_dcgm(served, exporter_names(release), "DCGM_EXP_") == {}
    if DCGM_VERSIONS[version] == release:
        assert unknown_dcgm(served, go_dcgm_table(version), "DCGM_FI_") == {}


def test_every_field_the_simulator_models_exists_in_a_supported_dcgm() -> None:
    known = {n: {"opsctl.hwsim.metrics.KNOWN"} for n in KNOWN}
    anywhere = {n for v in VERSIONS for n in dcgm_table(v).ids}
    assert unknown_dcgm(known, anywhere, "DCGM_FI_") == {}
    assert unknown_dcgm(known, exporter_names(EXPORTER_RELEASES[-1]), "DCGM_EXP_") == {}
    # EVERY_FIELD_CSV is the simulator's file "under DCGM 4.5's names"
    every = {c.field: {"EVERY_FIELD_CSV"} for c in parse_collectors(EVERY_FIELD_CSV)}
    assert unknown_dcgm(every, dcgm_table("4.5.3"), "DCGM_FI_") == {}
    assert unknown_dcgm(every, go_dcgm_table("4.5.3"), "DCGM_FI_") == {}
    assert unknown_dcgm(every, exporter_names("4.5.3-4.8.2"), "DCGM_EXP_") == {}


@pytest.mark.parametrize("version", [v for v in VERSIONS if DCGM_VERSIONS[v]])
def test_the_tables_hold_every_field_the_exporter_enables_by_default(version: str) -> None:
    # a check of the extracted tables against an artefact they were not extracted from: the
    # exporter release built for this DCGM ships these rows enabled, so its DCGM and go-dcgm know them
    release = exporter_for(version)
    enabled = {n: {f"default-counters.csv {release}"} for n, on in default_counters(release).items() if on}
    assert len(enabled) >= 20
    assert unknown_dcgm(enabled, dcgm_table(version), "DCGM_FI_") == {}
    assert unknown_dcgm(enabled, go_dcgm_table(version), "DCGM_FI_") == {}
    assert unknown_dcgm(enabled, exporter_names(release), "DCGM_EXP_") == {}


def test_the_names_fixture_matches_the_committed_default_counters_csv() -> None:
    # dcgm-exporter.default-counters.csv (a commit after tag 4.5.3-4.8.2) row for row
    text = (REAL_WORLD / "dcgm-exporter.default-counters.csv").read_text()
    rows = {}
    for line in text.splitlines():
        body = line.lstrip("#").strip()
        if body.startswith("DCGM_") and "," in body:
            rows[next(csv.reader(io.StringIO(body)))[0].strip()] = not line.startswith("#")
    assert rows == default_counters("4.5.3-4.8.2")


def test_each_fixture_comes_from_the_revision_the_script_names() -> None:
    spec = importlib.util.spec_from_file_location(
        "extract_dcgm_fields", REPO / "scripts/extract_dcgm_fields.py"
    )
    assert spec and spec.loader
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    for name, _kind, _repo, rev in script.FIXTURES:
        first = (REAL_WORLD / name).read_text().splitlines()[0]
        assert f" @ {rev} " in first, (name, first)


def test_a_wrong_name_is_caught() -> None:
    # the contract has teeth: a misspelt field queried, a misspelt exporter collector, a row the
    # role renders for a DCGM that lacks it, and a table giving a field another id
    names = queried()
    names["DCGM_FI_DEV_ECC_DBE_VOLATILE_TOTAL"] = {"a mutated query"}
    names["DCGM_EXP_XID_ERROR_COUNT"] = {"a mutated query"}
    for v in VERSIONS:
        missing = unknown_dcgm(names, dcgm_table(v), "DCGM_FI_")
        assert {n: w for n, w in missing.items() if n not in NOT_IN_EVERY_DCGM} == {
            "DCGM_FI_DEV_ECC_DBE_VOLATILE_TOTAL": {"a mutated query"}
        }
    assert unknown_dcgm(names, exporter_names("3.3.9-3.6.1"), "DCGM_EXP_") == {
        "DCGM_EXP_XID_ERROR_COUNT": {"a mutated query"}
    }
    rendered = {n: {"dcgm role counters"} for n in render_dcgm_counters("3.3.9")}
    rendered["DCGM_FI_DEV_CLOCKS_EVENT_REASONS"] = {"a requirement range gone wrong"}
    assert set(unknown_dcgm(rendered, dcgm_table("3.3.9"), "DCGM_FI_")) == {
        "DCGM_FI_DEV_CLOCKS_EVENT_REASONS"
    }
    assert set(unknown_dcgm(rendered, go_dcgm_table("3.3.9"), "DCGM_FI_")) == {
        "DCGM_FI_DEV_CLOCKS_EVENT_REASONS"
    }
    shifted = FieldTable("dcgm_fields.go-dcgm-3385e277.txt")
    shifted.ids["DCGM_FI_DEV_XID_ERRORS"] += 1
    assert conflicting_ids(["DCGM_FI_DEV_XID_ERRORS"], [dcgm_table("3.3.9"), shifted]) == {
        "DCGM_FI_DEV_XID_ERRORS": {
            "dcgm_fields.DCGM-v3.3.9.txt": 230,
            "dcgm_fields.go-dcgm-3385e277.txt": 231,
        }
    }
