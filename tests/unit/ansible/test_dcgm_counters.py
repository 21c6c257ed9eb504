"""The dcgm role's counters file, rendered by the real Ansible for the pinned DCGM and a newer one,
read the way dcgm-exporter reads it (encoding/csv, '#' comments, trimmed fields, exactly three)."""

from __future__ import annotations

import csv
import io
from pathlib import Path

import pytest
from provisioning_helpers import REPO, render_playbook

PLAYBOOK = "tests/unit/ansible/playbooks/render_dcgm_counters.yml"


def render(tmp_path: Path, dcgm_version: str) -> dict[str, str]:
    dest = tmp_path / f"counters-{dcgm_version}.csv"
    render_playbook(
        PLAYBOOK, tmp_path, "-e", f"dcgm_render_dest={dest}", "-e", f"dcgm_version={dcgm_version}",
        inventory="localhost,",
    )
    rows = [r for r in csv.reader(io.StringIO(dest.read_text())) if r and not r[0].startswith("#")]
    assert all(len(r) == 3 for r in rows), rows  # dcgm-exporter refuses any other shape
    return {r[0].strip(): r[1].strip() for r in rows}


def pinned_dcgm() -> str:
    text = (REPO / "inventory/production/group_vars/all/versions.yml").read_text()
    (line,) = [x for x in text.splitlines() if x.startswith("dcgm_version:")]
    return line.split(":", 1)[1].strip().strip('"')


@pytest.fixture(scope="module")
def rendered(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, str]]:
    tmp = tmp_path_factory.mktemp("dcgm")
    return {v: render(tmp, v) for v in (pinned_dcgm(), "4.5.3", "4.6.0")}


def test_what_health_reads_is_exported_by_the_pinned_dcgm(rendered: dict[str, dict[str, str]]) -> None:
    fields = rendered[pinned_dcgm()]
    assert pinned_dcgm().startswith("3.")
    for name in (
        "DCGM_FI_DEV_GPU_TEMP",
        "DCGM_FI_DEV_XID_ERRORS",
        "DCGM_EXP_XID_ERRORS_COUNT",
        "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL",
        "DCGM_FI_DEV_ROW_REMAP_FAILURE",
        "DCGM_FI_DEV_ROW_REMAP_PENDING",
        "DCGM_FI_DEV_PCIE_LINK_GEN",
        "DCGM_FI_DEV_PCIE_LINK_WIDTH",
        "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS",
    ):
        assert name in fields, name
    assert fields["DCGM_EXP_XID_ERRORS_COUNT"] == "gauge"
    # fields DCGM 3 does not know would stop dcgm-exporter from starting: left out
    assert "DCGM_FI_DEV_GET_GPU_RECOVERY_ACTION" not in fields
    assert "DCGM_FI_DEV_CLOCKS_EVENT_REASONS" not in fields


def test_a_newer_dcgm_gets_the_recovery_action_and_the_new_name(rendered: dict[str, dict[str, str]]) -> None:
    fields = rendered["4.5.3"]
    assert fields["DCGM_FI_DEV_GET_GPU_RECOVERY_ACTION"] == "gauge"
    assert "DCGM_FI_DEV_CLOCKS_EVENT_REASONS" in fields and "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS" not in fields
    assert "DCGM_EXP_XID_ERRORS_COUNT" in fields


def test_field_1523_under_each_releases_name(rendered: dict[str, dict[str, str]]) -> None:
    # DCGM 4.6 renamed field 1523 DCGM_FI_DEV_GPU_RECOVERY_ACTION (dcgm_fields.h; go-dcgm keeps the
    # old name only in its legacy table): each release gets its own name, once
    assert "DCGM_FI_DEV_GPU_RECOVERY_ACTION" not in rendered["4.5.3"]
    assert rendered["4.6.0"]["DCGM_FI_DEV_GPU_RECOVERY_ACTION"] == "gauge"
    assert "DCGM_FI_DEV_GET_GPU_RECOVERY_ACTION" not in rendered["4.6.0"]
