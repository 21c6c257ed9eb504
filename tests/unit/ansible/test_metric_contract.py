"""One contract between what is queried and what production exports.

Every metric name that opsctl's Prometheus source, the alert rules and the Grafana dashboards query
must be enabled by the roles as shipped: a DCGM field in the dcgm role's counters file rendered for
the pinned DCGM, a node_exporter series from a collector the node_exporter role runs. A query that
production cannot answer is listed in OPTIONAL with the reason, and counted in the output.
"""

from __future__ import annotations

import pytest
import yaml
from provisioning_helpers import REPO
from test_dcgm_counters import pinned_dcgm, render
from upstream_contract import queried

# Queried on purpose though the pinned DCGM cannot export them: the source reads whichever exists.
OPTIONAL = {
    "DCGM_FI_DEV_CLOCKS_EVENT_REASONS": "the DCGM 4 name of the clock event reasons; DCGM 3 exports "
    "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS, which is queried too",
    "DCGM_FI_DEV_GET_GPU_RECOVERY_ACTION": "DCGM >= 4.5 only; without it a reset-class drain waits for a "
    "reboot (docs/runbook.md)",
    "DCGM_FI_DEV_GPU_RECOVERY_ACTION": "the DCGM >= 4.6 name of the same field",
    # page retirement is how GPUs before Ampere spare memory; H200 remaps rows instead
    # (DCGM_FI_DEV_ROW_REMAP_*, exported): the check reads these only on older fleets
    "DCGM_FI_DEV_RETIRED_SBE": "pre-Ampere page retirement; H200 reports row remapping",
    "DCGM_FI_DEV_RETIRED_DBE": "pre-Ampere page retirement; H200 reports row remapping",
    "DCGM_FI_DEV_RETIRED_PENDING": "pre-Ampere page retirement; H200 reports row remapping",
}
# node_exporter metric families and the collector that produces them (all on by default in the
# supported releases, infiniband included: registerCollector(..., defaultEnabled) in 1.5.0 and 1.9.0).
NODE_COLLECTORS = {
    "node_infiniband_": "infiniband",
    "node_boot_time_seconds": "stat",
    "node_textfile_": "textfile",
    "node_filesystem_": "filesystem",
    "node_nfs_": "nfs",
}
DEFAULT_OFF: set[str] = set()


def node_exporter_collectors(args: str | None = None) -> set[str]:
    """The collectors node_exporter runs with `args` (the role's default flags unless given)."""
    if args is None:
        defaults = yaml.safe_load((REPO / "roles/node_exporter/defaults/main.yml").read_text())
        args = str(defaults["node_exporter_args"])
    on = {c for c in NODE_COLLECTORS.values() if c not in DEFAULT_OFF and f"--no-collector.{c}" not in args}
    return on | {c for c in DEFAULT_OFF if f"--collector.{c}" in args}


def unexported(names: dict[str, set[str]], counters: set[str], collectors: set[str]) -> dict[str, set[str]]:
    missing: dict[str, set[str]] = {}
    for name, where in names.items():
        if name in OPTIONAL:
            continue
        if name.startswith("DCGM_"):
            ok = name in counters
        else:
            collector = next((c for prefix, c in NODE_COLLECTORS.items() if name.startswith(prefix)), None)
            ok = collector is not None and collector in collectors
        if not ok:
            missing[name] = where
    return missing


@pytest.fixture(scope="module")
def counters(tmp_path_factory: pytest.TempPathFactory) -> set[str]:
    return set(render(tmp_path_factory.mktemp("contract"), pinned_dcgm()))


def test_every_queried_metric_is_exported_by_the_shipped_roles(counters: set[str]) -> None:
    names = queried()
    assert len(names) > 20  # the source, the rules and the dashboards were all read
    missing = unexported(names, counters, node_exporter_collectors())
    optional = sorted(n for n in names if n in OPTIONAL)
    print(f"{len(names)} metrics queried, {len(optional)} optional: {', '.join(optional)}")
    assert missing == {}, "queried but not exported as shipped: " + "; ".join(
        f"{n} ({', '.join(sorted(w))})" for n, w in sorted(missing.items())
    )


def test_the_contract_fails_when_a_counter_is_removed(counters: set[str]) -> None:
    """A mutated copy of the rendered counters file, without the XID count, breaks the contract."""
    mutated = counters - {"DCGM_EXP_XID_ERRORS_COUNT"}
    missing = unexported(queried(), mutated, node_exporter_collectors())
    assert set(missing) == {"DCGM_EXP_XID_ERRORS_COUNT"}
    assert "opsctl prometheus source" in missing["DCGM_EXP_XID_ERRORS_COUNT"]


def test_the_node_exporter_flags_decide_the_collectors() -> None:
    assert "infiniband" in node_exporter_collectors("--web.listen-address=:9100")  # on by default
    assert "infiniband" not in node_exporter_collectors("--no-collector.infiniband")


def test_the_contract_fails_without_the_infiniband_collector(counters: set[str]) -> None:
    missing = unexported(queried(), counters, node_exporter_collectors() - {"infiniband"})
    assert missing and all(n.startswith("node_infiniband_") for n in missing)


def test_every_optional_query_is_still_queried() -> None:
    names = queried()
    stale = [n for n in OPTIONAL if n not in names]
    assert stale == [], f"OPTIONAL lists metrics nothing queries any more: {stale}"
