"""`lab inject` / `lab heal`: change a GPU machine's simulated hardware, and slurmd for its fault."""

from __future__ import annotations

from dataclasses import dataclass

from opsctl.errors import UsageError
from opsctl.lab import labsim
from opsctl.lab.config import LabConfig, Machine
from opsctl.lab.ssh import ssh

SLURMD_FAULT = "slurmd_stopped"
# Not simulated hardware but a kernel-level stand-in: a mount inside the machine that never answers
# (opsctl.lab.hungmount); `mount_hung=/lustre/x`.
MOUNT_HUNG = "mount_hung"


@dataclass(frozen=True)
class FaultResult:
    node: str
    action: str  # "inject" or "heal"
    fault: str | None
    active_faults: list[str]
    slurmd: str | None  # "stopped"/"started" when this call changed slurmd


def _gpu_machine(cfg: LabConfig, node: str) -> Machine:
    machine = cfg.machine(node)
    if machine.role != "gpu":
        raise UsageError(f"{node} is the head; only GPU machines have simulated hardware")
    return machine


def _slurmd(cfg: LabConfig, machine: Machine, action: str) -> None:
    ssh(cfg, machine, ["systemctl", action, "slurmd.service"], timeout=60)


def inject(cfg: LabConfig, node: str, spec: str) -> FaultResult:
    machine = _gpu_machine(cfg, node)
    if spec.split("=", 1)[0].strip() == MOUNT_HUNG:
        from opsctl.lab import hungmount

        hungmount.hang(cfg, machine, spec.split("=", 1)[1].strip() if "=" in spec else "")
        active = [f"{MOUNT_HUNG}={p}" for p in hungmount.held(cfg, node)]
        return FaultResult(node, "inject", spec, active, None)
    from opsctl.hwsim import faults as hwfaults
    from opsctl.hwsim import state as hwstate

    path = hwstate.state_path(labsim.host_state_dir(cfg, node), node)
    state = hwstate.load(path)
    hwfaults.apply_fault(state, spec)  # raises a UsageError for an unknown or malformed fault
    slurmd = None
    if spec.split("=", 1)[0].split(",", 1)[0].strip() == SLURMD_FAULT:
        _slurmd(cfg, machine, "stop")
        slurmd = "stopped"
    hwstate.save(state, path)
    labsim.render_sysfs(cfg, node, state)
    return FaultResult(node, "inject", spec, list(state.faults), slurmd)


def heal(cfg: LabConfig, node: str) -> FaultResult:
    machine = _gpu_machine(cfg, node)
    from opsctl.hwsim import faults as hwfaults
    from opsctl.hwsim import state as hwstate

    path = hwstate.state_path(labsim.host_state_dir(cfg, node), node)
    state = hwstate.load(path)
    was_stopped = not state.slurmd_up
    hwfaults.heal(state)
    from opsctl.lab import hungmount

    hungmount.release(cfg, machine)
    slurmd = None
    if was_stopped:
        _slurmd(cfg, machine, "start")
        slurmd = "started"
    hwstate.save(state, path)
    labsim.render_sysfs(cfg, node, state)
    return FaultResult(node, "heal", None, list(state.faults), slurmd)
