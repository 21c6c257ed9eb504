"""The ``[health]`` section of opsctl.toml, and the glue that builds sources, thresholds and
policy from it (``PolicyConfig``: the keys ``opsctl.remediation`` decides by; ``ssh_settings``: how
the SSH-based sources reach nodes). Loaded through ``opsctl.config`` (registered as a section
there)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from opsctl.address import check_absolute, check_addresses
from opsctl.checks.catalogue import CATALOGUE
from opsctl.checks.thresholds import Thresholds, load_thresholds
from opsctl.config import check_fields, limits
from opsctl.errors import ConfigError
from opsctl.parsers.lustre_probe import probe_command

if TYPE_CHECKING:
    from opsctl.evidence.ssh import SshSettings

SOURCES = ("prometheus", "ssh", "dcgm", "prometheus+ssh")
# Checks remediation needs evidence for (see opsctl.checks.coverage): without them it refuses to act.
REQUIRED_CHECKS = ("gpu-count", "gpu-xid", "gpu-ecc-dbe", "gpu-row-remap")
CHECK_CODES = frozenset(c.code for c in CATALOGUE)
_RDMA_NAME = re.compile(r"[A-Za-z0-9_.-]+")  # a name under /sys/class/infiniband (mlx5_0, ibp3s0)


@dataclass
class PolicyConfig:
    """The ``[health]`` keys remediation decides by (``HealthSection.policy``)."""

    max_drains: int = 2
    max_fraction: float = 0.10
    window_seconds: float = 3600.0
    storm_min_nodes: int = 3
    storm_fraction: float = 0.25
    resume_after_clean: int = 3
    shadow: bool = False
    escalate_window: float = 7 * 86400.0  # a second drain for the same GPU within this is held
    probe_hung_passes: int = 3  # a probe that times out this many passes in a row FAILs
    fatal_max_drains: int = 2  # fatal-class drains per window past the brake and the guardrail
    # seconds a node may lack a required family that other nodes have before it FAILs evidence-lost
    unknown_fail_after: float = 600.0
    # seconds a node may stay UNKNOWN before an alert says so (every node: the source, one page)
    unknown_alert_after: float = 300.0
    # seconds a non-fatal FAIL must persist before it drains (a storm whose nodes Prometheus scrapes
    # at different offsets shows on a few nodes first); 0: drain at first sight
    confirm_after: float = 10.0
    # a reboot-class latch on an idle drained node asks Slurm to reboot it (RebootProgram)
    auto_reboot: bool = False

    def validate(self) -> None:
        if self.max_drains < 0 or not 0 <= self.max_fraction <= 1:
            raise ConfigError("health: max_drains must be >= 0 and max_fraction in [0, 1]")
        if self.storm_min_nodes < 2 or not 0 < self.storm_fraction <= 1:
            raise ConfigError("health: storm_min_nodes must be >= 2 and storm_fraction in (0, 1]")
        if self.resume_after_clean < 1 or self.window_seconds <= 0:
            raise ConfigError("health: resume_after_clean must be >= 1 and window_seconds > 0")
        if self.escalate_window < 0 or self.probe_hung_passes < 1:
            raise ConfigError("health: escalate_window must be >= 0 and probe_hung_passes >= 1")
        if self.fatal_max_drains < 0:
            raise ConfigError("health: fatal_max_drains must be >= 0")
        if self.unknown_fail_after <= 0 or self.unknown_alert_after <= 0:
            raise ConfigError("health: unknown_fail_after and unknown_alert_after must be > 0")
        if not 0 <= self.confirm_after <= 3600:
            raise ConfigError("health: confirm_after must be between 0 and 3600 seconds")


@dataclass
class HealthSection:
    # where evidence comes from (docs/health-checks.md); prometheus+ssh adds the SSH-only probes
    source: str = field(default="prometheus", metadata=limits(choices=SOURCES))
    # checks remediation needs evidence for on every node: without it, it refuses to act
    required_checks: list[str] = field(default_factory=lambda: list(REQUIRED_CHECKS))
    thresholds: str | None = field(default=None, metadata=limits(path=True))  # site overrides (TOML)
    # shortcut for thresholds gpu.expected_per_node
    expected_gpus: int | None = field(default=None, metadata=limits(ge=0))
    # shortcut for thresholds ib.devices: the compute fabric's HCAs (the opsctl_remediation role
    # renders the inventory's ib_fabric_hcas); other RDMA devices, Ethernet ports of the same
    # cards included, are not judged. None: the thresholds' list
    ib_devices: list[str] | None = None
    nodes: str | None = None  # default node set (NODESET wins); set, it replaces Slurm's node list
    # seconds: older exporter samples are UNKNOWN
    stale_after: float = field(default=30.0, metadata=limits(gt=0))
    window_seconds: int = field(default=600, metadata=limits(gt=0))  # counter increase window (Prometheus)
    # what remediation remembers between passes: drains, latches, clean-pass counts, boot ids
    state_file: str = field(default="/var/lib/opsctl/health-state.json", metadata=limits(path=True))
    # one JSON line per decision (drain, resume, hold, refusal) with its evidence
    decision_log: str = field(default="/var/log/opsctl/health-decisions.jsonl", metadata=limits(path=True))
    shadow: bool = False  # log what remediation would do, change nothing
    max_drains: int = field(default=2, metadata=limits(ge=0))  # brake: drains per brake_window
    # brake: share of the partition drained per brake_window
    max_fraction: float = field(default=0.10, metadata=limits(ge=0, le=1))
    # seconds the brake (max_drains, max_fraction) counts over
    brake_window: float = field(default=3600.0, metadata=limits(gt=0))
    # fatal-class drains (reset/reboot/replace faults) per brake_window past the brake and the drain
    # guardrail; beyond them a fatal node is latched in service and paged (docs/runbook.md)
    fatal_max_drains: int = field(default=2, metadata=limits(ge=0))
    # same signature on this many nodes (and storm_fraction) = suspect checker
    storm_min_nodes: int = field(default=3, metadata=limits(ge=2))
    # ... and at least this share of the judged nodes
    storm_fraction: float = field(default=0.25, metadata=limits(gt=0, le=1))
    # K consecutive clean passes before opsctl resumes its own drain
    resume_after_clean: int = field(default=3, metadata=limits(ge=1))
    # drained again for the same GPU within this: held for a person
    escalate_window: float = field(default=7 * 86400.0, metadata=limits(ge=0))
    # a probe timing out this many passes in a row FAILs (probe-hung)
    probe_hung_passes: int = field(default=3, metadata=limits(ge=1))
    # seconds a node may lack evidence for a required check that other nodes have before it FAILs
    # evidence-lost (drained, latching reboot): 40 scrapes at 15 s, past an exporter's restart and
    # its crash-loop backoff, so only evidence that is not coming back drains (docs/runbook.md)
    unknown_fail_after: float = field(default=600.0, metadata=limits(gt=0))
    # seconds a node may stay UNKNOWN before an alert (a ticket; every node at once: the source,
    # a page): past a Prometheus or exporter restart, the resolve window of the service's alerts
    unknown_alert_after: float = field(default=300.0, metadata=limits(gt=0))
    # seconds a FAIL whose fix is no GPU reset, reboot or replacement (a port, a mount, slurmd) must
    # persist before it drains: the next pass (15 s apart) confirms it on a scrape of every node, so a
    # fleet-wide false FAIL is seen as the storm it is before its first nodes are drained
    confirm_after: float = field(default=10.0, metadata=limits(ge=0, le=3600))
    # a node drained for a reboot-class fault (an XID 79, a hung nvidia-smi) is rebooted through
    # Slurm once idle (`scontrol reboot ASAP nextstate=RESUME`, the slurm role's RebootProgram) and
    # resumed by Slurm; the kernel's boot id proves it. Off: a person reboots it (docs/runbook.md)
    auto_reboot: bool = False
    ssh_user: str = "root"  # the ssh and dcgm sources log in as this user
    ssh_port: int = 22  # where a node's address names no port
    ssh_key: str | None = field(default=None, metadata=limits(path=True))  # unset: ssh's own default keys
    # host keys to trust (unset: the user's known_hosts); an unknown or changed key is refused
    ssh_known_hosts: str | None = field(default=None, metadata=limits(path=True))
    ssh_parallel: int = field(default=16, metadata=limits(ge=1))  # nodes probed at once
    ssh_timeout: float = field(default=60.0, metadata=limits(gt=0))  # per node
    # node -> "host" or "host:port" for the ssh and dcgm sources, where a node name does not resolve
    ssh_addresses: dict[str, str] = field(default_factory=dict)
    ib_sysfs_root: str | None = None  # None: /sys/class/infiniband ($OPSCTL_IB_SYSFS_ROOT on a node wins)
    ib_sample_seconds: float = 2.0  # seconds between the two IB counter reads of the ssh source
    # 0: health watches only; 1-4: also run `dcgmi diag -r N`
    dcgm_diag_level: int = field(default=0, metadata=limits(ge=0, le=4))
    # 0: off; 1-4: `dcgmi diag -r N` on an idle drained node before resume
    resume_diag_level: int = field(default=0, metadata=limits(ge=0, le=4))
    # The Lustre probe (ssh source, check "lustre"): the client mount point and the server NIDs to
    # lctl ping; unset: no Lustre, the check does not apply. Each step under lustre_timeout; a write
    # slower than lustre_max_write_seconds FAILs (unset: only a failed write does).
    lustre_mount: str | None = None
    lustre_nids: list[str] = field(default_factory=list)  # server NIDs to `lctl ping`
    lustre_write_mib: int = 16  # size of the probe's test write
    lustre_timeout: float = 30.0  # seconds per probe step
    lustre_max_write_seconds: float | None = None  # unset: only a failed write FAILs

    def validate(self) -> None:
        check_fields(self)
        unknown = sorted(set(self.required_checks) - CHECK_CODES)
        if unknown:
            known = ", ".join(sorted(CHECK_CODES))
            raise ValueError(f"required_checks: unknown check {', '.join(unknown)} (known: {known})")
        check_absolute("ib_sysfs_root", self.ib_sysfs_root)
        check_addresses("ssh_addresses", self.ssh_addresses)
        self._validate_lustre()
        self._validate_ib_devices()
        try:
            self.policy().validate()
        except ConfigError as exc:
            raise ValueError(str(exc).removeprefix("health: ")) from None

    def _validate_ib_devices(self) -> None:
        seen: set[str] = set()
        for name in self.ib_devices or []:
            if not isinstance(name, str) or not _RDMA_NAME.fullmatch(name):
                raise ValueError(f"ib_devices: {name!r} is not an RDMA device name")
            if name in seen:
                raise ValueError(f"ib_devices: {name} listed twice")
            seen.add(name)

    def _validate_lustre(self) -> None:
        if self.lustre_mount is None:
            if self.lustre_nids:
                raise ValueError("lustre_nids: set lustre_mount too (the client mount point to probe)")
            return
        if self.lustre_timeout < 1 or (self.lustre_max_write_seconds or 1) <= 0:
            raise ValueError("lustre_timeout: must be >= 1; lustre_max_write_seconds: must be > 0")
        check_absolute("lustre_mount", self.lustre_mount)
        try:  # the same checks the probe's own command builder makes (NIDs, size)
            probe_command(self.lustre_mount, self.lustre_nids, self.lustre_write_mib)
        except ValueError as exc:
            field_name = "lustre_write_mib" if "write_mib" in str(exc) else "lustre_nids"
            raise ValueError(f"{field_name}: " + str(exc).removeprefix("lustre probe: ")) from None

    def policy(self) -> PolicyConfig:
        return PolicyConfig(
            max_drains=self.max_drains,
            max_fraction=self.max_fraction,
            window_seconds=self.brake_window,
            storm_min_nodes=self.storm_min_nodes,
            storm_fraction=self.storm_fraction,
            resume_after_clean=self.resume_after_clean,
            shadow=self.shadow,
            escalate_window=self.escalate_window,
            probe_hung_passes=self.probe_hung_passes,
            fatal_max_drains=self.fatal_max_drains,
            unknown_fail_after=self.unknown_fail_after,
            unknown_alert_after=self.unknown_alert_after,
            confirm_after=self.confirm_after,
            auto_reboot=self.auto_reboot,
        )

    def load_thresholds(self) -> Thresholds:
        base = load_thresholds(self.thresholds)
        data: dict[str, Any] = dict(base.data)
        if self.expected_gpus is not None:
            data["gpu"] = {**data["gpu"], "expected_per_node": self.expected_gpus}
        if self.ib_devices is not None:
            data["ib"] = {**data["ib"], "devices": list(self.ib_devices)}
        return Thresholds(data)


def ssh_settings(
    h: HealthSection, addresses: dict[str, str] | None = None, ib_sysfs_root: str | None = None
) -> SshSettings:
    """How the SSH-based commands (health's ssh and dcgm sources, preflight) reach nodes: `[health]`
    ssh_* keys, with addresses and the IB tree overridable by the caller (preflight's own keys)."""
    from opsctl.evidence.ssh import SshSettings, address_map

    hosts, ports = address_map({**h.ssh_addresses, **(addresses or {})})
    return SshSettings(
        user=h.ssh_user,
        port=h.ssh_port,
        key_filename=h.ssh_key,
        known_hosts=h.ssh_known_hosts,
        node_timeout=h.ssh_timeout,
        parallel=h.ssh_parallel,
        ib_sample_seconds=h.ib_sample_seconds,
        hosts=hosts,
        ports=ports,
        ib_sysfs_root=ib_sysfs_root or h.ib_sysfs_root,
    )


def health_ssh_settings(h: HealthSection) -> SshSettings:
    """ssh_settings plus the mounts the thresholds require and the Lustre probe (health checks them,
    preflight does not)."""
    from dataclasses import replace

    return replace(
        ssh_settings(h),
        required_mounts=list(h.load_thresholds().get("mounts", "required")),
        lustre_mount=h.lustre_mount,
        lustre_nids=list(h.lustre_nids),
        lustre_write_mib=h.lustre_write_mib,
        lustre_timeout=h.lustre_timeout,
        lustre_max_write_seconds=h.lustre_max_write_seconds,
    )
