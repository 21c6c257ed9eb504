"""`lab inject` / `lab heal`: change a GPU machine's simulated hardware, and slurmd for its fault."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

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


def _fabric_inject(cfg: LabConfig, node: str, spec: str) -> FaultResult:
    """A fabric fault (opsctl.hwsim.fabric_tools: ``slow_rail=mlx5_3[,gbps=180]``,
    ``bad_cable=PEER[,gbps=40]``, ``nvlink_fabric=In Progress``), kept next to the node's state
    file, where the machine's ib_write_bw, all_reduce_perf and nvidia-smi read it."""
    from opsctl.hwsim import fabric_tools

    path = _state_file(cfg, node)
    name, _, rest = spec.partition("=")
    peer = None
    if name.strip() == "bad_cable":
        peer_node = rest.split(",", 1)[0].strip()
        if not peer_node:
            raise UsageError("bad_cable needs the other end: bad_cable=PEER[,gbps=N]")
        peer = _state_file(cfg, _gpu_machine(cfg, peer_node).name)
    fabric_tools.apply_fabric_fault(path, spec, peer)  # a FaultError (usage) for a bad spec
    return FaultResult(node, "inject", spec, _active(cfg, node), None)


def _fabric_heal(cfg: LabConfig, node: str) -> None:
    """Clear the node's fabric faults, and a bad cable's record on its other end."""
    from opsctl.hwsim import fabric_tools

    path = _state_file(cfg, node)
    for peer in fabric_tools.load_faults(path).links:
        if peer in {m.name for m in cfg.gpu_machines}:
            fabric_tools.heal_fabric(path, _state_file(cfg, peer))
    fabric_tools.heal_fabric(path)


def _state_file(cfg: LabConfig, node: str) -> Path:
    from opsctl.hwsim import state as hwstate

    return hwstate.state_path(labsim.host_state_dir(cfg, node), node)


def _active(cfg: LabConfig, node: str) -> list[str]:
    from opsctl.hwsim import fabric_tools
    from opsctl.hwsim import state as hwstate

    path = _state_file(cfg, node)
    return list(hwstate.load(path).faults) + fabric_tools.fault_specs(fabric_tools.load_faults(path))


def inject(cfg: LabConfig, node: str, spec: str) -> FaultResult:
    machine = _gpu_machine(cfg, node)
    from opsctl.hwsim.fabric_tools import FABRIC_FAULTS

    if spec.split("=", 1)[0].split(",", 1)[0].strip() in FABRIC_FAULTS:
        return _fabric_inject(cfg, node, spec)
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
    _fabric_heal(cfg, node)
    slurmd = None
    if was_stopped:
        _slurmd(cfg, machine, "start")
        slurmd = "started"
    hwstate.save(state, path)
    labsim.render_sysfs(cfg, node, state)
    return FaultResult(node, "heal", None, list(state.faults), slurmd)
