"""`lab up`, `lab down`, `lab status`: the lab's lifecycle, idempotent both ways."""

from __future__ import annotations

import json
import shutil
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import opsctl
from opsctl.errors import ConfigError, OpsctlError, Refused, Unreachable
from opsctl.lab import connect, image, inventory, labsim, machines, net, runtime
from opsctl.lab.config import LabConfig, Machine
from opsctl.lab.packages import collect_packages
from opsctl.lab.shell import run
from opsctl.lab.ssh import system_state

REPO_ROOT = Path(opsctl.__file__).resolve().parents[1]
LAB_INVENTORY = REPO_ROOT / "inventory" / "lab"
READY_STATES = ("running", "degraded")


@dataclass(frozen=True)
class MachineStatus:
    name: str
    address: str
    role: str
    pid: int | None
    state: str  # systemd's state over SSH, "unreachable", or "stopped"


@dataclass(frozen=True)
class LabStatus:
    bridge: str
    bridge_present: bool
    inventory: str
    machines: list[MachineStatus]
    stray_veths: list[str]

    @property
    def up(self) -> bool:
        return bool(self.machines) and all(m.state in READY_STATES for m in self.machines)

    def as_dict(self) -> dict[str, object]:
        d = asdict(self)
        d["up"] = self.up
        return d


def save_config(cfg: LabConfig, inventory_dir: Path) -> None:
    cfg.state_dir.mkdir(parents=True, exist_ok=True)
    data = {
        "gpu_nodes": cfg.gpu_nodes,
        "subnet": cfg.subnet,
        "bridge": cfg.bridge,
        "cache_dir": str(cfg.cache_dir),
        "inventory": str(inventory_dir),
    }
    cfg.state_file.write_text(json.dumps(data, indent=1) + "\n")


def load_config(base: LabConfig) -> tuple[LabConfig, Path]:
    """The running lab's config (node count, inventory) as `lab up` saved it under the state dir."""
    try:
        data = json.loads(base.state_file.read_text())
    except FileNotFoundError:
        raise ConfigError(f"no lab is up (no {base.state_file}); run `opsctl lab up`") from None
    except ValueError as exc:
        raise ConfigError(f"{base.state_file}: {exc}") from None
    cfg = LabConfig(
        gpu_nodes=int(data["gpu_nodes"]),
        subnet=str(data["subnet"]),
        bridge=str(data["bridge"]),
        cache_dir=Path(str(data["cache_dir"])),
        state_dir=base.state_dir,
        suite=base.suite,
        mirror=base.mirror,
    )
    return cfg, Path(str(data["inventory"]))


def ensure_key(cfg: LabConfig) -> str:
    if not cfg.ssh_key.exists():
        cfg.state_dir.mkdir(parents=True, exist_ok=True)
        run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "opsctl-lab", "-f", cfg.ssh_key])
    return cfg.ssh_key.with_suffix(".pub").read_text()


def wait_ready(cfg: LabConfig, wanted: list[Machine], timeout: float = 180) -> dict[str, str]:
    """Poll every machine over SSH until systemd reports it booted, or give up with what we saw."""
    deadline = time.monotonic() + timeout
    states: dict[str, str] = {}
    pending = list(wanted)
    while pending:
        for m in list(pending):
            states[m.name] = system_state(cfg, m)
            if states[m.name] in READY_STATES:
                pending.remove(m)
        if pending and time.monotonic() > deadline:
            seen = ", ".join(f"{m.name}={states.get(m.name)}" for m in pending)
            raise Unreachable(
                f"lab machines did not finish booting within {timeout:.0f}s: {seen} (console logs under "
                f"{cfg.state_dir}/machines/*/console.log; `opsctl lab down` removes the partial lab)"
            )
        if pending:
            time.sleep(1)
    return states


def prepare(cfg: LabConfig) -> image.BaseImage:
    """The base image with every package the roles install, built or topped up; boots nothing.
    What `up` does first, on its own so that the bootstrap can do it while pip runs."""
    return image.ensure_image(cfg, collect_packages(REPO_ROOT))


def up(
    cfg: LabConfig, inventory_dir: Path = LAB_INVENTORY, *, timeout: float = 180, stage_runtime: bool = False
) -> LabStatus:
    """Bring the lab to `cfg`: build/reuse the image, bridge, machines; write the inventory.

    `stage_runtime` also stages the training runtime's wheelhouse into the NFS stand-in, which puts
    the GPU machines into the inventory's `training_runtime` group (site.yml then builds it).
    """
    live = {p.machine: p for p in machines.running(cfg)}
    foreign = sorted(n for n, p in live.items() if p.upper != str(cfg.upper_dir(n)))
    if foreign:
        # Another lab (another state dir: a test run, a second checkout) owns this bridge; its
        # machines would not accept our SSH key. Refuse rather than adopt or kill them.
        owner = Path(live[foreign[0]].upper).parents[2]
        raise Refused(
            f"bridge {cfg.bridge} is in use by a lab with state dir {owner} (machines {', '.join(foreign)}); "
            f"take it down first: OPSCTL_LAB_STATE={owner} opsctl lab down"
        )
    base = prepare(cfg)
    public_key = ensure_key(cfg)
    net.ensure_bridge(cfg)
    wanted = {m.name for m in cfg.machines}
    # Machines from a bigger earlier lab that this one does not have.
    extra = [p for name, p in live.items() if name not in wanted]
    if extra:
        machines.stop(extra)
    # Stale host-side veths of machines that are not running would make nspawn fail to boot them.
    net.delete_links([v for v in net.lab_veths(cfg) if v not in {net.veth_name(n) for n in live}])
    machines.prepare_shared(cfg)
    if stage_runtime:
        runtime.stage(cfg, REPO_ROOT)
    save_config(cfg, inventory_dir)
    for m in cfg.machines:
        if m.name in live:
            continue
        shutil.rmtree(cfg.upper_dir(m.name), ignore_errors=True)
        machines.prepare_upper(cfg, m, public_key)
        if m.role == "gpu":
            labsim.install(cfg, m, cfg.upper_dir(m.name))
        machines.boot(cfg, m, base.rootfs)
    wait_ready(cfg, cfg.machines, timeout=timeout)
    inventory.write_inventory(cfg, inventory_dir, LAB_INVENTORY / "group_vars")
    return status(cfg, inventory_dir)


def status(cfg: LabConfig, inventory_dir: Path) -> LabStatus:
    live = {p.machine: p.pid for p in machines.running(cfg)}
    rows = []
    for m in cfg.machines:
        pid = live.get(m.name)
        state = system_state(cfg, m) if pid is not None else "stopped"
        rows.append(MachineStatus(m.name, m.address, m.role, pid, state))
    veths = net.lab_veths(cfg)
    live_veths = {net.veth_name(n) for n in live}
    return LabStatus(
        bridge=cfg.bridge,
        bridge_present=net.bridge_exists(cfg.bridge),
        inventory=str(inventory_dir),
        machines=rows,
        stray_veths=[v for v in veths if v not in live_veths],
    )


def lab_mounts(cfg: LabConfig) -> list[str]:
    """Host mount points under the lab's state dir (there should be none once nspawn is gone)."""
    root = str(cfg.state_dir.resolve())
    out = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        fields = line.split()
        if len(fields) > 4 and (fields[4] == root or fields[4].startswith(root + "/")):
            out.append(fields[4])
    return sorted(out, key=len, reverse=True)


def plan_down(cfg: LabConfig, inventory_dir: Path | None = None) -> list[str]:
    """What `down` would remove, for --dry-run."""
    procs, foreign = _ours(cfg, machines.running(cfg))
    plan = [f"stop machine {p.machine} (pid {p.pid})" for p in procs]
    if connect.munge_pidfile(cfg).exists():
        plan.append("stop the host's lab munged")
    keep = {net.veth_name(n) for n in foreign}
    plan += [f"delete veth {v}" for v in net.lab_veths(cfg) if v not in keep]
    if net.bridge_exists(cfg.bridge) and not foreign:
        plan.append(f"delete bridge {cfg.bridge}")
    plan += [f"unmount {m}" for m in lab_mounts(cfg)]
    if inventory_dir is not None and (inventory_dir / inventory.HOSTS_FILE).exists():
        plan.append(f"remove {inventory_dir / inventory.HOSTS_FILE}")
    if cfg.state_dir.exists():
        plan.append(f"remove {cfg.state_dir}")
    return plan


def _ours(
    cfg: LabConfig, procs: list[machines.NspawnProcess]
) -> tuple[list[machines.NspawnProcess], list[str]]:
    """Machines of this lab, or orphans whose state dir is gone; and the names of other labs' machines."""
    mine, foreign = [], []
    root = str(cfg.state_dir) + "/"
    for p in procs:
        upper = Path(p.upper) if p.upper else None
        if p.upper.startswith(root) or upper is None or not upper.exists():
            mine.append(p)
        else:
            foreign.append(p.machine)
    return mine, foreign


def down(cfg: LabConfig, inventory_dir: Path | None = None) -> list[str]:
    """Remove every trace: machines, veths, bridge, mounts, upper dirs, key, generated inventory.

    Machines another lab (another state dir) runs on the same bridge are left alone, and so is the
    bridge while they use it.
    """
    done = []
    procs, foreign = _ours(cfg, machines.running(cfg))
    if procs:
        left = machines.stop(procs)
        if left:  # never report a lab down while its machines still run
            pids = ", ".join(map(str, left))
            raise OpsctlError(f"lab down: machines still running after SIGKILL (pids {pids})")
        done.append(f"stopped {len(procs)} machine(s): {', '.join(p.machine for p in procs)}")
    if connect.stop_munged(cfg):
        done.append("stopped the host's lab munged")
    keep = {net.veth_name(n) for n in foreign}
    veths = [v for v in net.lab_veths(cfg) if v not in keep]
    if veths:
        net.delete_links(veths)
        done.append(f"deleted veths {', '.join(veths)}")
    if foreign:
        done.append(f"kept bridge {cfg.bridge}: another lab's machines use it ({', '.join(foreign)})")
    elif net.bridge_exists(cfg.bridge):
        net.delete_bridge(cfg)
        done.append(f"deleted bridge {cfg.bridge}")
    for mnt in lab_mounts(cfg):
        run(["umount", "-l", mnt], check=False)
        done.append(f"unmounted {mnt}")
    if inventory_dir is not None:
        hosts = inventory_dir / inventory.HOSTS_FILE
        if hosts.exists():
            hosts.unlink()
            done.append(f"removed {hosts}")
    if cfg.state_dir.exists():
        shutil.rmtree(cfg.state_dir)
        done.append(f"removed {cfg.state_dir}")
    return done
