"""Slurm's output shapes against opsctl's parsers, for exactly the commands the CLI backend runs
(`sinfo --json`, `squeue --json`, `scontrol -d -o show node`, `scontrol -o show job`).

Slurm 22.05 (Debian 12's 22.05.8): captured from the real daemons run as the simulated cluster.
Slurm 24.11: derived from SchedMD's source at slurm-24-11-7-1 (its `--json` is data_parser v0.0.42,
which opsctl has no adapter for: the CLI backend must fall back to the text). Provenance of every
fixture: tests/fixtures/real-world/SOURCES.md. Both releases show one scenario, so one table of
expectations serves both.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path

import pytest

from opsctl.errors import ConfigError
from opsctl.model import Node
from opsctl.slurm import openapi_v0038, text
from opsctl.slurm.base import SlurmError
from opsctl.slurm.cli import CliBackend
from opsctl.slurm.states import gpus_in_tres

REAL_WORLD = Path(__file__).resolve().parents[2] / "fixtures" / "real-world"

FIXTURES: dict[str, dict[tuple[str, ...], str]] = {
    "22.05": {
        ("sinfo", "--json"): "slurm.sinfo-json.22.05.8.sim-capture.json",
        ("squeue", "--json"): "slurm.squeue-json.22.05.8.sim-capture.json",
        ("scontrol", "-d", "-o", "show", "node"): "slurm.scontrol-d-o-show-node.22.05.8.sim-capture.txt",
        ("scontrol", "-o", "show", "job"): "slurm.scontrol-o-show-job.22.05.8.sim-capture.txt",
    },
    "24.11": {
        ("sinfo", "--json"): "slurm.sinfo-json.24.11.7.derived.json",
        ("scontrol", "-d", "-o", "show", "node"): "slurm.scontrol-d-o-show-node.24.11.7.derived.txt",
        ("scontrol", "-o", "show", "job"): "slurm.scontrol-o-show-job.24.11.7.derived.txt",
    },
}
NODE_TEXT = ("scontrol", "-d", "-o", "show", "node")
JOB_TEXT = ("scontrol", "-o", "show", "job")
SINFO_JSON = ("sinfo", "--json")

# node -> (state, flags, display state, out of service, GPUs allocated, reason); 8 GPUs (h200) each
NODES: dict[str, tuple[str, set[str], str, bool, int, str]] = {
    "gpu-001": ("idle", set(), "idle", False, 0, ""),
    "gpu-002": ("allocated", set(), "allocated", False, 8, ""),
    "gpu-003": ("mixed", set(), "mixed", False, 4, ""),
    "gpu-004": ("mixed", {"DRAIN"}, "draining", True, 2, "opsctl:health:xid 79 on GPU 3"),
    "gpu-005": ("idle", {"DRAIN"}, "drained", True, 0, "operator: fan=loud, check PSU"),
    "gpu-006": ("down", {"NOT_RESPONDING"}, "down*", True, 0, "Not responding"),
    "gpu-007": ("mixed", {"REBOOT_REQUESTED"}, "mixed", False, 1, "opsctl:health:reboot after xid 79"),
    "gpu-008": ("idle", {"NOT_RESPONDING"}, "idle*", False, 0, ""),
}
# job -> (state, nodes, GPUs per node, exit code, reason prefix)
JOBS: dict[int, tuple[str, list[str], int, int, str]] = {
    1: ("FAILED", ["gpu-001"], 0, 3, "NonZeroExitCode"),
    2: ("RUNNING", ["gpu-002"], 8, 0, ""),
    3: ("RUNNING", ["gpu-003"], 4, 0, ""),
    4: ("RUNNING", ["gpu-004"], 2, 0, ""),
    5: ("RUNNING", ["gpu-007"], 1, 0, ""),
    6: ("PENDING", [], 8, 0, "ReqNodeNotAvail"),
}


def read(name: str) -> str:
    return (REAL_WORLD / name).read_text(encoding="utf-8")


class FixtureCli(CliBackend):
    """The CLI backend with Slurm's commands answered from one release's fixtures."""

    def __init__(self, version: str, fmt: str = "auto") -> None:
        super().__init__(fmt=fmt)
        self.outputs = FIXTURES[version]
        self.ran: list[tuple[str, ...]] = []

    def run(self, argv: list[str], stdin: str | None = None, extra_env: dict[str, str] | None = None) -> str:
        self.ran.append(tuple(argv))
        return read(self.outputs[tuple(argv)])


def assert_scenario(nodes: list[Node]) -> None:
    assert [n.name for n in nodes] == sorted(NODES)
    for node in nodes:
        state, flags, display, out, alloc, reason = NODES[node.name]
        got = (node.state, node.flags, node.display_state, node.out_of_service, node.gpus_alloc, node.reason)
        assert got == (state, flags, display, out, alloc, reason), node.name
        assert (node.gpus_total, node.gpu_type, node.partitions) == (8, "h200", ["gpu"]), node.name
        assert node.cpus == 4, node.name  # CPUEfctv (text) or cpus (JSON): the launch gate's count
        assert node.reason_user == ("root" if reason else ""), node.name


@pytest.mark.parametrize(("version", "fmt", "commands"), [
    ("22.05", "auto", [SINFO_JSON, ("squeue", "--json")]),
    ("22.05", "text", [NODE_TEXT, JOB_TEXT]),
    ("24.11", "auto", [SINFO_JSON, NODE_TEXT, JOB_TEXT]),  # data_parser v0.0.42: no adapter, text
])
def test_cli_backend_reads_each_release(version: str, fmt: str, commands: list[tuple[str, ...]]) -> None:
    backend = FixtureCli(version, fmt)
    nodes = backend.nodes()
    assert_scenario(nodes)
    assert {n.name: n.jobs for n in nodes if n.jobs} == {
        "gpu-002": [2], "gpu-003": [3], "gpu-004": [4], "gpu-007": [5]}
    jobs = {j.job_id: j for j in backend.jobs()}
    assert sorted(jobs) == sorted(JOBS)
    for job_id, (state, on, gpus, exit_code, reason) in JOBS.items():
        job = jobs[job_id]
        got = (job.state, job.nodes, job.gpus_per_node, job.exit_code)
        assert got == (state, on, gpus, exit_code), job_id
        assert job.reason.startswith(reason) and (job.reason == "") == (reason == ""), job_id
        assert (job.user, job.partition, job.requeue, job.restarts) == ("root", "gpu", True, 0), job_id
    assert sorted(set(backend.ran)) == sorted(commands)


def test_24_11_json_is_refused_by_name_not_misread() -> None:
    doc = json.loads(read(FIXTURES["24.11"][SINFO_JSON]))
    assert openapi_v0038.PLUGIN not in json.dumps(doc["meta"])
    with pytest.raises(ConfigError, match=r"data_parser/v0\.0\.42"):
        FixtureCli("24.11", fmt="json").nodes()


def test_perfctrs_is_an_idle_node_not_an_unresponsive_one() -> None:
    """Slurm 22.05's NODE_STATE_NET (network performance counters; removed in 24.05)."""
    from_text = text.parse_nodes(read("slurm.scontrol-d-o-show-node.22.05.8.perfctrs.derived.txt"))
    from_json = openapi_v0038.parse_sinfo(json.loads(read("slurm.sinfo-json.22.05.8.perfctrs.derived.json")))
    for (node,) in (from_text, from_json):
        got = (node.name, node.state, node.flags, node.display_state)
        assert got == ("gpu-001", "idle", {"PERFCTRS"}, "idle")
        assert not node.out_of_service


def test_gpus_allocated_are_not_counted_twice() -> None:
    """24.11 with typed GPU TRES: AllocTRES carries gres/gpu=N beside gres/gpu:h200=N. Without `-d`
    (no GresUsed) the parser reads AllocTRES and must still count N."""
    records = read(FIXTURES["24.11"][NODE_TEXT]).splitlines()
    assert any("gres/gpu=8,gres/gpu:h200=8" in r for r in records)
    for record in records:
        used = int(re.search(r" GresUsed=gpu:h200:(\d+)", record).group(1))  # type: ignore[union-attr]
        alloc_tres = re.search(r" AllocTRES=(\S*)", record).group(1)  # type: ignore[union-attr]
        assert gpus_in_tres(alloc_tres) == used
        (node,) = text.parse_nodes(re.sub(r" GresUsed=\S+", "", record))
        assert (node.gpus_alloc, node.gpus_total) == (used, 8), node.name


def test_untyped_gpus() -> None:
    capture = read("slurm.scontrol-d-o-show-node.22.05.8.untyped-gpus.sim-capture.txt")
    nodes = {n.name: n for n in text.parse_nodes(capture)}
    assert {k: (n.gpus_total, n.gpus_alloc, n.gpu_type) for k, n in nodes.items()} == {
        "gpu-001": (8, 4, ""), "gpu-002": (8, 0, "")}


def _json_nodes(doc: str) -> object:
    return openapi_v0038.parse_sinfo(json.loads(doc))


# (fixture, what changed, the change, parser, what the error must name)
MUTATIONS = [
    *[(FIXTURES[v][NODE_TEXT], f"{v}: unknown base state", ("State=IDLE ", "State=HEALTHY "),
       text.parse_nodes, r"gpu-001.*HEALTHY") for v in FIXTURES],
    *[(FIXTURES[v][NODE_TEXT], f"{v}: unknown state flag", ("State=IDLE+DRAIN ", "State=IDLE+DRAIN_LATER "),
       text.parse_nodes, r"gpu-005.*DRAIN_LATER") for v in FIXTURES],
    *[(FIXTURES[v][NODE_TEXT], f"{v}: State= renamed", (" State=", " NodeState="),
       text.parse_nodes, r"gpu-001.*State") for v in FIXTURES],
    (FIXTURES["22.05"][SINFO_JSON], "22.05 json: unknown state", ('"state": "idle"', '"state": "healthy"'),
     _json_nodes, r"gpu-001.*healthy"),
    (FIXTURES["22.05"][SINFO_JSON], "22.05 json: unknown flag", ('"DRAIN"', '"DRAIN_LATER"'),
     _json_nodes, r"gpu-004.*DRAIN_LATER"),
    (FIXTURES["22.05"][SINFO_JSON], "22.05 json: state_flags renamed", ('"state_flags"', '"flags"'),
     _json_nodes, r"gpu-001.*state_flags"),
]


@pytest.mark.parametrize(("fixture", "what", "change", "parse", "named"), MUTATIONS,
                         ids=[m[1] for m in MUTATIONS])
def test_a_changed_shape_is_an_error_not_a_healthy_node(
    fixture: str, what: str, change: tuple[str, str], parse: Callable[[str], object], named: str
) -> None:
    original = read(fixture)
    assert change[0] in original, what
    parse(original)  # the fixture itself reads
    with pytest.raises(SlurmError, match=named):
        parse(original.replace(change[0], change[1]))


def test_every_flag_of_both_releases_reads() -> None:
    """The flags Slurm 22.05 and 24.11 print (node_state_flags[] in slurm_protocol_defs.c) are all
    accepted; 24.11's BLOCKED is new, 22.05's PERFCTRS is gone from 24.11."""
    record = read(FIXTURES["24.11"][NODE_TEXT]).splitlines()[0]
    for flag in ("BLOCKED", "CLOUD", "COMPLETING", "DRAIN", "DYNAMIC_FUTURE", "DYNAMIC_NORM", "INVALID_REG",
                 "FAIL", "MAINTENANCE", "POWER_DOWN", "POWER_UP", "PERFCTRS", "POWERED_DOWN",
                 "REBOOT_REQUESTED", "REBOOT_ISSUED", "RESERVED", "RESUME", "NOT_RESPONDING", "PLANNED",
                 "POWERING_UP", "POWERING_DOWN"):
        (node,) = text.parse_nodes(record.replace("State=IDLE ", f"State=IDLE+{flag} "))
        assert node.state == "idle" and node.flags == {flag}, flag
