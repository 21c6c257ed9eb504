"""The machine lab end to end: boot, simulated hardware, converge with site.yml, Slurm, Prometheus,
an injected fault reaching Prometheus, the training runtime on the NFS stand-in run by a Slurm job.
(The teardown that leaves nothing behind is test_lab_teardown.py, the last lab module.)"""

from __future__ import annotations

import json
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from lab_helpers import GPU_NODES, Converged, RunningLab, lab_status, wait_for
from packaging.utils import canonicalize_name
from tiny_job import TINY_JOB

from opsctl.lab.converge import ConvergeResult

# The first lab test also builds the image (first run on a machine); `converged` converges twice.
pytestmark = [pytest.mark.integration, pytest.mark.lab, pytest.mark.slow, pytest.mark.timeout(1800)]

REPO = Path(__file__).resolve().parents[3]
RUNTIME = "/shared/opsctl/runtime"
# Run by the runtime's python on a GPU machine under Slurm: the project and torch from the share,
# a tiny model of training.model, one forward pass.
RUNTIME_JOB = """
import json, os, sys, torch, opsctl, training
from transformers import AutoModelForCausalLM
from training.config import ModelConfig
from training.model import build_char_tokenizer, tiny_config
tok = build_char_tokenizer()
torch.manual_seed(0)
model = AutoModelForCausalLM.from_config(tiny_config(ModelConfig(), len(tok), tok))
ids = torch.tensor([tok.encode("7+8=15\\n")])
with torch.no_grad():
    logits = model(input_ids=ids).logits
real = os.path.realpath
print(json.dumps({"prefix": real(sys.prefix), "torch": torch.__version__, "training": real(training.__file__),
                  "opsctl": real(opsctl.__file__), "logits": list(logits.shape),
                  "finite": bool(torch.isfinite(logits).all())}))
"""


def prom_query(lab: RunningLab, query: str) -> list[dict[str, Any]]:
    url = f"http://{lab.cfg.head.address}:9090/api/v1/query?" + urllib.parse.urlencode({"query": query})
    try:
        with urllib.request.urlopen(url, timeout=10) as resp:
            body = json.load(resp)
    except OSError:
        return []
    result = body.get("data", {}).get("result", [])
    return result if isinstance(result, list) else []


def _node_of(series: dict[str, Any], lab: RunningLab) -> str:
    labels = series["metric"]
    if labels.get("Hostname"):
        return str(labels["Hostname"])
    by_addr = {m.address: m.name for m in lab.cfg.machines}
    return by_addr.get(str(labels.get("instance", "")).split(":")[0], str(labels.get("instance")))


def test_lab_boots_head_and_gpu_machines(lab: RunningLab) -> None:
    status = lab_status(lab)
    assert status["up"] is True
    rows = status["machines"]
    assert isinstance(rows, list)
    assert sorted(m["name"] for m in rows) == [*GPU_NODES, "head-01"]
    assert all(m["state"] in ("running", "degraded") for m in rows)
    assert (lab.inventory / "hosts.yml").is_file()
    assert (lab.inventory / "group_vars" / "all" / "lab.yml").is_file()


def test_prepare_finds_the_image_the_machines_boot_ready(lab: RunningLab) -> None:
    """`opsctl lab prepare` (the bootstrap's, beside pip) after `up`: the same cached image, the
    roles' packages on disk, nothing built again."""
    from opsctl.lab.image import image_dir

    root = image_dir(lab.cfg)
    built = (root / "debootstrap.log").stat().st_mtime_ns
    doc = json.loads(lab.opsctl("prepare", "--json", timeout=300).stdout)
    assert Path(doc["rootfs"]) == root / "rootfs"
    assert {"slurmd", "munge", "prometheus"} <= set(doc["packages"])
    assert (root / "debootstrap.log").stat().st_mtime_ns == built


def test_gpu_machines_show_simulated_h200s_and_hcas(lab: RunningLab) -> None:
    smi = lab.ssh("gpu-001", "nvidia-smi", "-q")
    assert smi.returncode == 0, smi.stderr
    assert smi.stdout.count("NVIDIA H200") == 8
    ib = lab.ssh("gpu-002", "ibstat")
    assert ib.returncode == 0, ib.stderr
    assert [f"mlx5_{i}" for i in range(8)] == [
        ln.split("'")[1] for ln in ib.stdout.splitlines() if ln.startswith("CA '")
    ]
    dev = lab.ssh("gpu-001", "ls", "/dev/nvidia0", "/dev/nvidia7")
    assert dev.returncode == 0, dev.stderr
    # The head has no simulated hardware at all.
    assert lab.ssh("head-01", "ls", "/usr/local/bin/nvidia-smi").returncode != 0


def test_nodes_have_no_route_out(lab: RunningLab) -> None:
    routes = lab.ssh("gpu-001", "ip", "-4", "route", "show")
    assert routes.returncode == 0
    assert "default" not in routes.stdout
    assert routes.stdout.strip().startswith(str(lab.cfg.network))


def test_site_yml_converges_the_lab_without_failures(converged: Converged) -> None:
    first = converged.first
    assert isinstance(first, ConvergeResult)
    assert set(first.recap) == {"head-01", *GPU_NODES}, first.output[-3000:]
    assert first.failed_hosts == [], first.report()
    assert first.returncode == 0, first.output[-3000:]
    # The roles say which hardware steps the lab skipped.
    assert "gpu_hardware_present=false" in first.output


def test_second_converge_changes_nothing(converged: Converged) -> None:
    second = converged.second
    assert isinstance(second, ConvergeResult)
    assert second is not converged.first, "first converge failed; see the previous test"
    assert second.failed_hosts == [], second.report()
    assert {h: r.changed for h, r in second.recap.items()} == dict.fromkeys(["head-01", *GPU_NODES], 0), (
        "\n".join(ln for ln in second.output.splitlines() if ln.startswith("changed:"))
    )


def test_slurm_lists_gpu_nodes_idle_and_runs_on_all(lab: RunningLab, converged: Converged) -> None:
    seen: list[str] = []

    def idle() -> dict[str, str] | None:
        proc = lab.ssh("head-01", "sinfo", "-h", "-N", "-o", "%N %t")
        seen[:] = [proc.stdout + proc.stderr]
        pairs = [line.split() for line in proc.stdout.splitlines()]
        states = {p[0]: p[1] for p in pairs if len(p) == 2}
        return states if states and all(s == "idle" for s in states.values()) else None

    try:
        states = wait_for("GPU nodes idle in sinfo", idle)
    except AssertionError:
        reasons = lab.ssh("head-01", "sinfo", "-R").stdout
        raise AssertionError(f"sinfo: {seen}\nsinfo -R:\n{reasons}") from None
    assert sorted(states) == GPU_NODES
    run = lab.ssh("head-01", "srun", f"-N{len(GPU_NODES)}", "--gres=gpu:h200:8", "hostname")
    assert run.returncode == 0, run.stderr
    assert sorted(run.stdout.split()) == GPU_NODES


def test_slurm_schedules_on_the_inventorys_fabric_units(lab: RunningLab, converged: Converged) -> None:
    """inventory/lab gives gpu-001 and gpu-002 one fabric unit and gpu-003 another: slurmctld reads
    them from topology.conf as leaf switches under the top one (topology/tree)."""
    proc = lab.ssh("head-01", "scontrol", "show", "topology")
    assert proc.returncode == 0, proc.stderr
    switches = {}
    for line in proc.stdout.splitlines():
        fields = dict(f.split("=", 1) for f in line.split() if "=" in f)
        if "SwitchName" in fields:
            switches[fields["SwitchName"]] = fields
    assert {name: (s.get("Level"), s.get("Nodes")) for name, s in switches.items() if name != "fabric"} == {
        "unit1": ("0", "gpu-[001-002]"), "unit2": ("0", "gpu-003"),
    }, proc.stdout  # fmt: skip
    assert switches["fabric"]["Level"] == "1" and switches["fabric"]["Switches"] == "unit1,unit2", proc.stdout


def test_a_slurm_job_runs_the_training_runtime_from_the_share(lab: RunningLab, converged: Converged) -> None:
    """site.yml built the runtime once (on gpu-001) on the NFS stand-in; a job on the other GPU
    machine imports torch and the training package from /shared and runs a forward pass."""
    assert "the lab's stand-in for the NFS mount" in converged.first.output
    current = lab.ssh("gpu-002", "readlink", f"{RUNTIME}/current")
    assert current.stdout.strip() == "opsctl-0.1.0/venv", current.stdout + current.stderr
    python = f"{RUNTIME}/current/bin/python"
    job = lab.ssh("head-01", "srun", "-N1", "-w", "gpu-002", python, "-c", RUNTIME_JOB, timeout=300)
    assert job.returncode == 0, job.stdout + job.stderr
    got = json.loads(job.stdout.strip().splitlines()[-1])
    venv = f"{RUNTIME}/opsctl-0.1.0/venv"
    assert got["prefix"] == venv and got["torch"] == "2.13.0+cpu"
    assert got["training"].startswith(f"{venv}/lib/python3.11/site-packages/training/")
    assert got["opsctl"].startswith(f"{venv}/lib/python3.11/site-packages/opsctl/")
    assert len(got["logits"]) == 3 and got["logits"][0] == 1 and got["logits"][1] >= 7 and got["finite"]
    # the share is one file system: the machine that built it and the one that ran the job agree
    assert lab.ssh("gpu-001", "test", "-x", f"{venv}/bin/python").returncode == 0
    # every package at the version of the CPU lock, which the role installed with (--constraint)
    lock = (REPO / "locks" / "cpu.txt").read_text()
    assert lab.ssh("gpu-002", "cat", f"{RUNTIME}/opsctl-0.1.0/constraints.txt").stdout == lock
    pairs = (line.split("==") for line in lock.splitlines() if line[:1].isalnum())
    pins = {canonicalize_name(name): version for name, version in pairs}
    listing = lab.ssh("gpu-002", python, "-m", "pip", "list", "--format=json", timeout=120)
    installed = {canonicalize_name(d["name"]): d["version"] for d in json.loads(listing.stdout)}
    # pip and setuptools are the ones `python3 -m venv` put there: the role installs with them
    locked = {n: v for n, v in installed.items() if n in pins and n not in {"pip", "setuptools"}}
    off = {n: (v, pins[n]) for n, v in locked.items() if v != pins[n]}
    assert len(locked) >= 20 and not off, f"installed (version, lock): {off}"
    torch = canonicalize_name("torch")
    assert installed[torch] == pins[torch] == "2.13.0+cpu"


SANDBOX_JOB = ("from training.sandbox import Sandbox; r = Sandbox(slots=1).run('print(6 * 7)'); "
               "print(r.exit_code, r.stdout.strip(), r.stderr.strip()[-300:])")


def test_model_code_runs_in_the_sandbox_on_a_gpu_machine(lab: RunningLab, converged: Converged) -> None:
    """The training_runtime role installs bubblewrap on every GPU machine: a job there runs code in
    the runtime's sandbox (training/sandbox.py), as a code environment's reward does."""
    python = f"{RUNTIME}/current/bin/python"
    job = lab.ssh("head-01", "srun", "-N1", "-w", "gpu-003", python, "-c", SANDBOX_JOB, timeout=120)
    assert job.returncode == 0, job.stdout + job.stderr
    assert job.stdout.split()[:2] == ["0", "42"], job.stdout


TINY_RUN = [*TINY_JOB, "trainer.steps=4"]


def test_an_rl_run_launched_from_the_host_trains_on_the_lab(lab: RunningLab, converged: Converged) -> None:
    """`opsctl launch rl-run` on the host submits to the lab's own slurmctld; the job runs the
    runtime site.yml built on /shared, and writes the run where the host reads it (the share's
    backing directory). Before any XID test: a fault stays on record for the XID window, and the
    launch's health gate would then leave too few nodes."""
    import tomllib

    from opsctl.launch.ledger import load_ledger
    from opsctl.watch import trainer_steps

    out = lab.opsctl("connect")
    toml = Path(out.stdout.split("OPSCTL_CONFIG=", 1)[1].split()[0])
    launch = tomllib.loads(toml.read_text())["launch"]
    run = Path(launch["runs_dir"]) / "tiny"
    assert run.is_relative_to(lab.cfg.shared_dir / "nfs")  # the NFS stand-in's backing directory
    demo = Path(__file__).resolve().parents[3] / "training" / "configs" / "demo.toml"
    args = ["launch", "rl-run", "--job", str(demo), "--output", str(run)]
    for o in TINY_RUN:
        args += ["-o", o]
    lab.opsctl_cli(*args, timeout=300)
    lab.opsctl_cli("watch", "--json", "--interval", "2", str(run), timeout=900)  # exit 0: COMPLETED
    led = load_ledger(run)
    assert led.final_state == "COMPLETED", led
    assert led.attempts[0].nodes == ["gpu-001", "gpu-002"]
    script = (run / "job.sbatch").read_text()
    assert f"RUN_DIR={launch['cluster_runs_dir']}/tiny\n" in script
    assert f"PY={RUNTIME}/current/bin/python\n" in script
    assert trainer_steps(run / "metrics.jsonl") == [0, 1, 2, 3]
    # every stage ran on a machine: its logs, written under /shared there, are here
    logs = run / "logs" / "attempt-0"
    stages = {"sft.log", "inference-0.log", "orchestrator.log", "trainer-0.log"}
    assert {p.name for p in logs.iterdir()} >= stages


def test_prometheus_has_dcgm_series_for_every_simulated_gpu(lab: RunningLab, converged: Converged) -> None:
    def complete() -> list[dict[str, Any]] | None:
        series = prom_query(lab, "DCGM_FI_DEV_GPU_TEMP")
        return series if len(series) == 8 * len(GPU_NODES) else None

    series = wait_for("8 DCGM_FI_DEV_GPU_TEMP series per GPU node", complete, timeout=180)
    per_node: dict[str, set[str]] = {}
    for s in series:
        per_node.setdefault(_node_of(s, lab), set()).add(str(s["metric"]["gpu"]))
    assert per_node == {n: {str(i) for i in range(8)} for n in GPU_NODES}


def test_injected_xid_shows_in_prometheus_and_heal_clears_it(lab: RunningLab, converged: Converged) -> None:
    out = lab.opsctl("inject", "gpu-001", "xid=79", "--json")
    assert json.loads(out.stdout)["active_faults"] == ["xid=79"]

    def xid_seen() -> list[dict[str, Any]] | None:
        series = prom_query(lab, "DCGM_FI_DEV_XID_ERRORS == 79")
        return [s for s in series if _node_of(s, lab) == "gpu-001"] or None

    seen = wait_for("XID 79 from gpu-001 in Prometheus", xid_seen, timeout=120)
    assert {s["metric"]["gpu"] for s in seen} == {"0"}
    assert not [s for s in prom_query(lab, "DCGM_FI_DEV_XID_ERRORS == 79") if _node_of(s, lab) == "gpu-002"]
    healed = lab.opsctl("heal", "gpu-001", "--json")
    assert json.loads(healed.stdout)["active_faults"] == []
    wait_for("XID cleared after heal", lambda: not xid_seen() or None, timeout=120)


def test_slurmd_stopped_fault_stops_slurmd_and_heal_restarts_it(
    lab: RunningLab, converged: Converged
) -> None:
    lab.opsctl("inject", "gpu-002", "slurmd_stopped")
    assert lab.ssh("gpu-002", "systemctl", "is-active", "slurmd").stdout.strip() != "active"
    lab.opsctl("heal", "gpu-002")
    assert lab.ssh("gpu-002", "systemctl", "is-active", "slurmd").stdout.strip() == "active"


def test_unknown_fault_is_a_usage_error(lab: RunningLab) -> None:
    proc = lab.opsctl("inject", "gpu-001", "melted", check=False)
    assert proc.returncode == 2
    assert proc.stderr.startswith("opsctl: error:") and "Traceback" not in proc.stderr


def test_host_reaches_lab_slurm_through_connect(lab: RunningLab, converged: Converged) -> None:
    out = lab.opsctl("connect")
    toml = Path(out.stdout.split("OPSCTL_CONFIG=", 1)[1].split()[0])
    import subprocess
    import tomllib

    conf = tomllib.loads(toml.read_text())
    env = dict(lab.env, SLURM_CONF=conf["slurm"]["slurm_conf"])
    proc = subprocess.run(
        ["sinfo", "-h", "-N", "-o", "%N"], env=env, capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 0, proc.stderr
    assert sorted(proc.stdout.split()) == GPU_NODES


def test_preflight_passes_on_the_lab_and_fails_the_node_missing_a_gpu(
    lab: RunningLab, converged: Converged
) -> None:
    import subprocess
    import sys

    out = lab.opsctl("connect")  # writes [preflight] from the lab inventory's hw_expected
    toml = Path(out.stdout.split("OPSCTL_CONFIG=", 1)[1].split()[0])

    def preflight() -> tuple[int, dict[str, dict[str, str]], str]:
        proc = subprocess.run(
            [sys.executable, "-m", "opsctl", "--config", str(toml), "preflight", "--json"],
            env=lab.env,
            capture_output=True,
            text=True,
            timeout=300,
        )
        doc = json.loads(proc.stdout) if proc.stdout.strip() else {"nodes": []}
        verdicts = {n["node"]: {v["code"]: v["status"] for v in n["verdicts"]} for n in doc["nodes"]}
        return proc.returncode, verdicts, proc.stdout + proc.stderr

    rc, verdicts, text = preflight()
    assert rc == 0, text
    assert sorted(verdicts) == GPU_NODES
    assert verdicts["gpu-001"]["preflight-slurm-gres"] == "OK"
    lab.opsctl("inject", "gpu-002", "gpu_missing=3")  # the shims read the new state on their next call
    try:
        rc, verdicts, text = preflight()
        assert rc == 1, text
        assert verdicts["gpu-002"]["preflight-gpu-count"] == "FAIL"
        assert "FAIL" not in verdicts["gpu-001"].values()
    finally:
        lab.opsctl("heal", "gpu-002")


def test_health_over_ssh_reads_the_machines_and_fails_only_the_faulty_ones(
    lab: RunningLab, converged: Converged
) -> None:
    import subprocess
    import sys

    out = lab.opsctl("connect")  # writes [health] ssh_addresses, ib_sysfs_root, key and known_hosts
    toml = Path(out.stdout.split("OPSCTL_CONFIG=", 1)[1].split()[0])

    def health() -> tuple[int, dict[str, dict[str, str]], str]:
        proc = subprocess.run(
            [sys.executable, "-m", "opsctl", "--config", str(toml), "health", "--source", "ssh", "--json"],
            env=lab.env,
            capture_output=True,
            text=True,
            timeout=300,
        )
        doc = json.loads(proc.stdout) if proc.stdout.strip() else {"nodes": []}
        worst: dict[str, dict[str, str]] = {}
        for n in doc["nodes"]:
            for v in n["verdicts"]:
                seen = worst.setdefault(n["node"], {}).get(v["code"], "OK")
                worst[n["node"]][v["code"]] = v["status"] if v["status"] != "OK" else seen
        return proc.returncode, worst, proc.stdout + proc.stderr

    rc, verdicts, text = health()
    assert rc == 0, text
    # read on the machines themselves: the GPU shims, the InfiniBand tree, slurmd's process
    assert {"gpu-count", "gpu-xid", "ib-port", "slurmd"} <= set(verdicts["gpu-001"]), verdicts
    lab.opsctl("inject", "gpu-002", "xid=79,gpu=5")
    lab.opsctl("inject", "gpu-001", "ib_down=mlx5_2")
    try:
        rc, verdicts, text = health()
        assert rc == 1, text
        assert [c for c, s in verdicts["gpu-001"].items() if s == "FAIL"] == ["ib-port"], verdicts
        # XID 79 and the driver's "reset required" that comes with it
        fails = [c for c, s in verdicts["gpu-002"].items() if s == "FAIL"]
        assert fails == ["gpu-xid", "gpu-recovery"], text
    finally:
        lab.opsctl("heal", "gpu-002")
        lab.opsctl("heal", "gpu-001")
    rc, verdicts, text = health()
    assert rc == 0, text


def test_hung_mount_is_unknown_then_fails_after_n_passes(
    lab: RunningLab, converged: Converged, tmp_path: Path
) -> None:
    """A mount that stops answering (a FUSE mount whose daemon never replies, opsctl.lab.hungmount)
    is UNKNOWN in one pass and FAILs as probe-hung after probe_hung_passes passes in a row."""
    import subprocess
    import sys

    out = lab.opsctl("connect")
    toml = Path(out.stdout.split("OPSCTL_CONFIG=", 1)[1].split()[0])
    thresholds = tmp_path / "thresholds.toml"
    thresholds.write_text('[mounts]\nrequired = [{ path = "/lustre/hung-probe" }]\n')
    config = tmp_path / "opsctl.toml"
    extra = (f'thresholds = "{thresholds}"\nprobe_hung_passes = 2\nshadow = true\n'
             f'state_file = "{tmp_path / "state.json"}"\ndecision_log = "{tmp_path / "decisions.jsonl"}"\n')
    # this test's own policy state: connect's state_file and decision_log lines give way to ours
    lines = [x for x in toml.read_text().splitlines() if not x.startswith(("state_file =", "decision_log ="))]
    text = "\n".join(lines) + "\n"
    assert "[health]\n" in text
    config.write_text(text.replace("[health]\n", "[health]\n" + extra, 1))

    def health_pass() -> tuple[int, dict[str, str]]:
        proc = subprocess.run(
            [sys.executable, "-m", "opsctl", "--config", str(config), "health", "gpu-001", "--source", "ssh",
             "--remediate", "--json"],
            env=lab.env, capture_output=True, text=True, timeout=300,
        )
        assert proc.stdout.strip(), proc.stderr
        doc = json.loads(proc.stdout)
        (node,) = doc["nodes"]
        got: dict[str, str] = {}
        for v in node["verdicts"]:
            if v["code"] in ("mount", "probe-hung") and v["status"] != "OK":
                got[v["code"]] = v["status"]
        return proc.returncode, got

    lab.opsctl("inject", "gpu-001", "mount_hung=/lustre/hung-probe")
    try:
        assert health_pass() == (3, {"mount": "UNKNOWN"})
        rc, got = health_pass()
        assert (rc, got) == (1, {"mount": "UNKNOWN", "probe-hung": "FAIL"})
        decisions = [json.loads(x) for x in (tmp_path / "decisions.jsonl").read_text().splitlines()]
        drains = [d for d in decisions if d["action"] == "drain"]
        assert [(d["node"], d["code"], d["result"]) for d in drains] == [("gpu-001", "probe-hung", "shadow")]
    finally:
        lab.opsctl("heal", "gpu-001")
