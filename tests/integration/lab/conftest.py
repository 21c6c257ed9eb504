"""One lab for every lab module (head + three GPU machines, the training runtime staged), booted
and converged once per test run, taken down even on failure.

Booting and converging a lab is most of what the lab tests cost (about five minutes each time), so
the modules share one: every module leaves the lab as it found it (faults healed, files restored,
jobs ended), and the modules run in the order of `LAB_MODULES` (tests/conftest.py), the rolling
update, which reboots machines and changes their packages, last but one, and the teardown test last.
"""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Iterator

import pytest
from diagnostics import slurm_view
from lab_helpers import GPU_NODES, Converged, RunningLab, run_guide_step

from opsctl.lab.config import from_env


def _can_run_lab() -> str | None:
    if os.geteuid() != 0:
        return "the lab needs root"
    for tool in ("systemd-nspawn", "debootstrap", "ip", "ssh", "munged"):
        if shutil.which(tool) is None:
            return f"{tool} is not installed (scripts/bootstrap.sh installs it)"
    return None


def boot_lab(tmp_path_factory: pytest.TempPathFactory, nodes: int, *up_args: str) -> Iterator[RunningLab]:
    reason = _can_run_lab()
    if reason:
        pytest.skip(reason)
    root = tmp_path_factory.mktemp("lab")
    env = dict(os.environ)
    env["OPSCTL_LAB_STATE"] = str(root / "state")
    env["OPSCTL_LAB_INVENTORY"] = str(root / "inventory")
    # The image cache is shared on purpose: it is built once per machine, outside the work tree.
    os.environ["OPSCTL_LAB_STATE"] = env["OPSCTL_LAB_STATE"]
    try:
        cfg = from_env(nodes)
    finally:
        del os.environ["OPSCTL_LAB_STATE"]
    running = RunningLab(cfg, root / "inventory", env)
    try:
        running.opsctl("up", "--nodes", str(nodes), "--json", *up_args, timeout=1800)
        yield running
    finally:
        # Keep the machines' console logs (pytest keeps its recent temp dirs) for post-mortems.
        for log in (cfg.state_dir / "machines").glob("*/console.log"):
            shutil.copy2(log, root / f"console-{log.parent.name}.log")
        running.opsctl("down", check=False, timeout=300)


@pytest.fixture(scope="session")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningLab]:
    """The shared lab, with the training runtime's wheelhouse staged into the NFS stand-in."""
    yield from boot_lab(tmp_path_factory, len(GPU_NODES), "--runtime")


@pytest.fixture(scope="session")
def converged(lab: RunningLab) -> Converged:
    """docs/getting-started.md's validate and converge steps on the fresh lab (site.yml, then a
    check-mode run), then site.yml again: the second real run must change nothing."""
    from opsctl.lab.converge import run_playbook
    from opsctl.lab.lab import REPO_ROOT

    (validate,) = run_guide_step(lab, "validate")
    assert validate.returncode == 0, validate.report()
    steps = run_guide_step(lab, "converge")
    first = steps[0]
    check = steps[1] if len(steps) > 1 else first
    second = run_playbook(REPO_ROOT, lab.inventory) if not first.failed_hosts else first
    return Converged(first, check, second)


# What a module may leave behind as it ends: a node finishing the module's last job or reboot.
SETTLE_SECONDS = 180


def gpu_states(lab: RunningLab) -> dict[str, str] | None:
    """Slurm's compact state of each GPU machine; None when slurmctld cannot be asked (no lab yet,
    or taken down by the teardown module)."""
    proc = lab.ssh(lab.cfg.head.name, "sinfo", "-h", "-N", "-o", "%N %t", timeout=30)
    if proc.returncode != 0:
        return None
    pairs = [line.split() for line in proc.stdout.splitlines()]
    return {p[0]: p[1] for p in pairs if len(p) == 2 and p[0] in GPU_NODES}


def settle(lab: RunningLab) -> dict[str, str]:
    """The GPU machines Slurm has not got idle, after up to SETTLE_SECONDS (polling: nothing is timed)."""
    deadline, busy = time.monotonic() + SETTLE_SECONDS, {}
    while time.monotonic() < deadline:
        busy = {n: s for n, s in (gpu_states(lab) or {}).items() if s != "idle"}
        if not busy:
            return {}
        time.sleep(5)
    return busy


@pytest.fixture(scope="module", autouse=True)
def leaves_gpu_machines_in_service(request: pytest.FixtureRequest, lab: RunningLab) -> Iterator[None]:
    """Every lab module leaves the GPU machines idle in Slurm, as the next module expects. One left
    drained, down or rebooting errors that module's teardown, with slurmctld's account of it, and is
    put back in service, so that the failure is reported once, where it happened, instead of
    failing every lab test after it."""
    yield
    if request.module.__name__.endswith("test_lab_teardown") or gpu_states(lab) is None:
        return
    busy = settle(lab)
    if not busy:
        return
    account = "\n".join(slurm_view(lab))
    head = lab.cfg.head.name
    for node in sorted(busy):
        lab.ssh(head, "scontrol", "cancel_reboot", node, timeout=30)  # refused when none is pending
        lab.ssh(head, "scontrol", "update", f"nodename={node}", "state=resume", timeout=30)
    left = settle(lab)
    pytest.fail(f"{request.module.__name__} left GPU machines out of service: {busy}"
                f"{f' (still after resuming: {left})' if left else ''}\n{account}", pytrace=False)
