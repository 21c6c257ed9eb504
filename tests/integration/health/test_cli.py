"""`opsctl health` end to end against a real Prometheus (emulated exporters), as a subprocess."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from promlab import Exporters, NodeHw, free_port, prometheus, wait_until

pytestmark = pytest.mark.integration

NODES = [f"gpu-{i:03d}" for i in range(1, 5)]


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    exporters = Exporters([NodeHw(n) for n in NODES])
    try:
        with prometheus(exporters) as url:
            cfg = tmp_path_factory.mktemp("cfg") / "opsctl.toml"
            state = cfg.parent
            # a Slurm that is configured but not running: nothing listens on its port
            slurm_conf = cfg.parent / "slurm.conf"
            slurm_conf.write_text(
                f"ClusterName=nowhere\nSlurmctldHost=localhost(127.0.0.1)\nSlurmctldPort={free_port()}\n"
                "NodeName=gpu-[001-004] CPUs=1\nPartitionName=gpu Nodes=ALL Default=YES\n"
            )
            cfg.write_text(
                f'[slurm]\nbackend = "cli"\nslurm_conf = "{slurm_conf}"\ncommand_timeout = 10\n'
                f'[prometheus]\nurl = "{url}"\n[health]\nnodes = "gpu-[001-004]"\nstale_after = 5.0\n'
                f'state_file = "{state / "state.json"}"\ndecision_log = "{state / "decisions.jsonl"}"\n'
            )
            yield exporters, cfg
    finally:
        exporters.close()


def opsctl(cfg, *args):
    return subprocess.run(
        [sys.executable, "-m", "opsctl", "--config", str(cfg), "health", *args],
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_exit_codes_and_json(lab):
    exporters, cfg = lab
    wait_until(lambda: opsctl(cfg, "--json").returncode == 0)
    table = opsctl(cfg)
    assert table.returncode == 0 and "gpu-001" in table.stdout and "all checks passed" in table.stdout

    with exporters.lock:
        exporters.nodes["gpu-002"].xids[(3, 79)] = 1
    r = wait_until(lambda: (p := opsctl(cfg, "--json")).returncode == 1 and p)
    doc = json.loads(r.stdout)
    assert doc["status"] == "FAIL" and doc["counts"]["FAIL"] == 1
    node = next(n for n in doc["nodes"] if n["node"] == "gpu-002")
    (v,) = [v for v in node["verdicts"] if v["status"] == "FAIL"]
    assert (v["code"], v["gpu"], v["evidence"]["xid"]) == ("gpu-xid", 3, 79)

    # the same pass, asking only about healthy nodes: exit 0
    assert opsctl(cfg, "gpu-[003-004]", "--json").returncode == 0

    # remediation needs Slurm's view of the nodes (whose drain is whose): with no Slurm to ask,
    # even a dry run stops with one line and exit 3 rather than guess
    r = opsctl(cfg, "--remediate", "--dry-run", "--json")
    assert r.returncode == 3 and r.stderr.startswith("opsctl: error:") and "Traceback" not in r.stderr

    with exporters.lock:
        exporters.nodes["gpu-002"].reboot()  # its XID 79 stays in the window, from an earlier boot
        exporters.nodes["gpu-004"].exporter_up = False
    r = wait_until(lambda: (p := opsctl(cfg, "--json")).returncode == 3 and p)
    doc = json.loads(r.stdout)
    assert [n["node"] for n in doc["nodes"] if n["status"] == "UNKNOWN"] == ["gpu-004"]
    with exporters.lock:
        exporters.nodes["gpu-004"].exporter_up = True


def test_usage_and_config_errors_are_one_line_exit_2(lab, tmp_path):
    _, cfg = lab
    for args in (["gpu-[001-"], ["--dry-run"], ["--source", "nope"]):
        r = opsctl(cfg, *args)
        assert r.returncode == 2, (args, r.stderr)
        assert "Traceback" not in r.stderr
    bad = tmp_path / "bad.toml"
    for section, key in (("max_fraction = 7", "max_fraction"),
                         ('ssh_addresses = { gpu-001 = "h:99999" }', "ssh_addresses.gpu-001"),
                         ('ib_sysfs_root = "relative"', "ib_sysfs_root")):
        bad.write_text(f"[health]\n{section}\n")
        r = opsctl(bad)
        assert r.returncode == 2 and r.stderr.startswith("opsctl: error:") and key in r.stderr, r.stderr
        assert len(r.stderr.splitlines()) == 1


def test_prometheus_down_is_exit_3(tmp_path):
    cfg = tmp_path / "opsctl.toml"
    cfg.write_text(f'[prometheus]\nurl = "http://127.0.0.1:{free_port()}"\n[health]\nnodes = "gpu-001"\n')
    r = opsctl(cfg)
    assert r.returncode == 3 and "unreachable" in r.stderr and "Traceback" not in r.stderr
