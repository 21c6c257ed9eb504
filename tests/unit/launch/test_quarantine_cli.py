"""`opsctl quarantine list|add|release` through the real entry point (`opsctl.cli.main`), with an
in-memory Slurm: output, exit codes, one-line errors, and nothing changed on bad input."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
from quarantine_unit_helpers import NodesOnly, four_nodes

import opsctl.slurm
from opsctl.cli import main
from opsctl.launch.quarantine import Quarantine, QuarantineEntry


@dataclass
class Run:
    code: int
    out: str
    err: str


Opsctl = Callable[..., Run]


@pytest.fixture
def site(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, Path, NodesOnly]:
    """opsctl.toml with its own quarantine file and audit log; Slurm is `NodesOnly`."""
    config = tmp_path / "opsctl.toml"
    config.write_text(f'[audit]\nlog = "{tmp_path / "audit.jsonl"}"\n'
                      f'[launch]\nquarantine_file = "{tmp_path / "q.json"}"\n')
    slurm = NodesOnly(four_nodes(gpu_002="opsctl:launch-node-failed:slurm in run run-a"))
    monkeypatch.setattr(opsctl.slurm, "backend_from_config", lambda config: slurm)
    monkeypatch.setenv("OPSCTL_CONFIG", str(config))
    return tmp_path / "q.json", tmp_path / "audit.jsonl", slurm


@pytest.fixture
def opsctl_main(capsys: pytest.CaptureFixture[str]) -> Opsctl:
    def run(*args: str) -> Run:
        with pytest.raises(SystemExit) as info:
            main(list(args))
        captured = capsys.readouterr()
        return Run(int(info.value.code or 0), captured.out, captured.err)

    return run


def seed(path: Path) -> None:
    Quarantine(path, {
        "gpu-002": QuarantineEntry("gpu-002", "slurm NOT_RESPONDING", "run-a", 41, 1796227200.0),
        "gpu-003": QuarantineEntry("gpu-003", "bad fan", time=1796227260.0, user="alice"),
    }).save()


def assert_one_line_error(run: Run, text: str) -> None:
    assert run.code == 2, run
    assert run.err.startswith("opsctl: error: ") and text in run.err, run.err
    assert len(run.err.strip().splitlines()) == 1 and "Traceback" not in run.err


def test_an_empty_list_says_so(site: tuple[Path, Path, NodesOnly], opsctl_main: Opsctl) -> None:
    path, _, slurm = site
    run = opsctl_main("quarantine", "list")
    assert run.code == 0 and run.out.strip() == f"no nodes quarantined ({path})"
    assert slurm.reads == 0  # nothing to annotate: Slurm is not asked
    doc = json.loads(opsctl_main("quarantine", "list", "--json").out)
    assert doc["count"] == 0 and doc["nodes"] == []


def test_list_shows_entries_and_slurm_state(site: tuple[Path, Path, NodesOnly], opsctl_main: Opsctl) -> None:
    path, _, _ = site
    seed(path)
    run = opsctl_main("quarantine", "list")
    assert run.code == 0 and run.err == ""
    rows = {line.split()[0]: line for line in run.out.splitlines()[1:]}
    assert set(rows) == {"gpu-002", "gpu-003"}
    for field in ("2026-12-02T16:00:00+00:00", "run-a", "41", "slurm NOT_RESPONDING", "drained",
                  "opsctl:launch-node-failed"):
        assert field in rows["gpu-002"]
    assert "alice" in rows["gpu-003"] and "idle" in rows["gpu-003"]
    doc = json.loads(opsctl_main("quarantine", "list", "gpu-[003-004]", "--json").out)
    assert [n["node"] for n in doc["nodes"]] == ["gpu-003"] and doc["slurm"]["reachable"]
    assert doc["nodes"][0]["slurm_state"] == "idle" and doc["nodes"][0]["user"] == "alice"


def test_list_without_slurm_still_lists(site: tuple[Path, Path, NodesOnly], opsctl_main: Opsctl) -> None:
    path, _, slurm = site
    seed(path)
    slurm.down = True
    run = opsctl_main("quarantine", "list")
    assert run.code == 0
    assert run.err.startswith("warning: Slurm state unknown: slurmctld unreachable")
    assert all("unknown" in line for line in run.out.splitlines()[1:])
    doc = json.loads(opsctl_main("quarantine", "list", "--json").out)
    assert doc["slurm"]["reachable"] is False and {n["slurm_state"] for n in doc["nodes"]} == {"unknown"}


def test_release_names_the_nodes_that_are_not_quarantined(
    site: tuple[Path, Path, NodesOnly], opsctl_main: Opsctl
) -> None:
    path, audit, _ = site
    seed(path)
    before = path.read_bytes()
    run = opsctl_main("quarantine", "release", "gpu-[001-003]", "--reason", "fixed")
    assert_one_line_error(run, "not quarantined: gpu-001 (nothing released")
    assert path.read_bytes() == before
    record = json.loads(audit.read_text().splitlines()[-1])
    assert (record["action"], record["result"]) == ("quarantine-release", "rejected")


def test_release_keeps_the_drain_and_suggests_resume(
    site: tuple[Path, Path, NodesOnly], opsctl_main: Opsctl
) -> None:
    path, audit, _ = site
    seed(path)
    dry = opsctl_main("quarantine", "release", "gpu-002", "--dry-run")
    assert dry.code == 0 and dry.out.startswith("dry run: would release gpu-002")
    assert Quarantine.load(path).nodes == {"gpu-002", "gpu-003"}
    run = opsctl_main("quarantine", "release", "gpu-[002-003]", "--reason", "PSU replaced")
    assert run.code == 0, run
    assert run.out.startswith("released gpu-[002-003] from the quarantine")
    assert "gpu-002 still drained by opsctl (release does not resume): opsctl resume gpu-002" in run.out
    assert Quarantine.load(path).nodes == set()
    records = [json.loads(x) for x in audit.read_text().splitlines()]
    assert [(r["action"], r["result"]) for r in records] == [("quarantine-release", "dry-run"),
                                                             ("quarantine-release", "applied")]
    assert records[1]["reason"] == "PSU replaced" and records[1]["nodes"] == ["gpu-002", "gpu-003"]


def test_release_json(site: tuple[Path, Path, NodesOnly], opsctl_main: Opsctl) -> None:
    path, _, _ = site
    seed(path)
    doc = json.loads(opsctl_main("quarantine", "release", "gpu-002", "--json").out)
    assert doc["action"] == "quarantine-release" and doc["result"] == "applied"
    assert doc["plan"]["drained_by_opsctl"] == ["gpu-002"]
    assert doc["plan"]["entries"][0]["run_id"] == "run-a"


def test_add_checks_names_and_is_audited(site: tuple[Path, Path, NodesOnly], opsctl_main: Opsctl) -> None:
    path, audit, slurm = site
    assert_one_line_error(opsctl_main("quarantine", "add", "gpu-[004-005]", "--reason", "fan"),
                          "unknown node(s): gpu-005")
    assert not path.exists()
    assert_one_line_error(opsctl_main("quarantine", "add", "gpu-004", "--reason", "  "), "empty reason")
    run = opsctl_main("quarantine", "add", "gpu-004", "--reason", "fan noise")
    assert run.code == 0 and run.out.startswith("quarantined gpu-004 (not drained")
    assert Quarantine.load(path).entries["gpu-004"].reason == "fan noise"
    again = opsctl_main("quarantine", "add", "gpu-004", "--reason", "fan noise")
    assert again.code == 0 and "skipped gpu-004: already quarantined (fan noise)" in again.out
    slurm.down = True  # names cannot be checked: added anyway, with a warning
    offline = opsctl_main("quarantine", "add", "gpu-001", "--reason", "fan noise", "--dry-run")
    assert offline.code == 0 and offline.err.startswith("warning: node names not checked against Slurm")
    results = [(r["action"], r["result"]) for r in map(json.loads, audit.read_text().splitlines())]
    assert results == [("quarantine-add", "rejected"), ("quarantine-add", "rejected"),
                       ("quarantine-add", "applied"), ("quarantine-add", "noop"),
                       ("quarantine-add", "dry-run")]


@pytest.mark.parametrize("args", [
    ["list"], ["list", "--json"], ["release", "gpu-002"], ["add", "gpu-001", "--reason", "x"],
])
def test_a_corrupt_file_is_one_line_exit_2(
    site: tuple[Path, Path, NodesOnly], opsctl_main: Opsctl, args: list[str]
) -> None:
    path, _, _ = site
    path.write_text('{"nodes": [{"node": "gpu-002", "reason": "x"')
    run = opsctl_main("quarantine", *args)
    assert_one_line_error(run, f"quarantine file {path} is unreadable")
    assert path.read_text() == '{"nodes": [{"node": "gpu-002", "reason": "x"'


def test_malformed_node_set_is_a_usage_error(site: tuple[Path, Path, NodesOnly], opsctl_main: Opsctl) -> None:
    assert_one_line_error(opsctl_main("quarantine", "release", "gpu-00;1"), "malformed node set")
    assert_one_line_error(opsctl_main("quarantine", "list", "gpu-[1-"), "malformed node set")


def test_help_imports_nothing_heavy() -> None:
    code = (
        "import sys, json\nfrom opsctl.cli import cli\n"
        "for args in (['--help'], ['quarantine', '--help'], ['quarantine', 'list', '--help']):\n"
        "    try:\n"
        "        cli.main(args=args, prog_name='opsctl', standalone_mode=False)\n"
        "    except SystemExit:\n"
        "        pass\n"
        "print(json.dumps(sorted(sys.modules)))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         timeout=120)
    loaded = set(json.loads(out.stdout.strip().splitlines()[-1]))
    assert "opsctl.cli.quarantine" in loaded
    heavy = {"torch", "transformers", "pandas", "numpy", "rich", "opsctl.launch.quarantine_ops"}
    assert not heavy & loaded
