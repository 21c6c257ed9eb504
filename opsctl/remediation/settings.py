"""The ``[remediator]`` section of opsctl.toml: how often the service passes, where it serves its
metrics, where the pause and status files live and which Alertmanager receives its alerts.

Everything about *what* a pass decides (sources, thresholds, brake, storm) stays in ``[health]``:
the service is ``opsctl health --remediate`` run by itself, not a second policy.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from opsctl.address import split_address
from opsctl.config import check_fields, limits

DEFAULT_PORT = 9105  # node_exporter is 9100, dcgm-exporter 9400, Alertmanager 9093
# How long an alert stays active after the last send that carried it, when no pass re-sends it: the
# service stopped, or the condition ended. Minutes, so that a slow pass (an SSH source on a large
# fleet, a slow slurmctld) and a few failing ones never let an alert lapse while its condition
# holds; bounded, so that a stopped service leaves nothing firing for long (the dead-man alert
# OpsctlRemediatorDown/Stale pages about then).
DEFAULT_RESOLVE_AFTER_S = 300.0


@dataclass
class RemediatorSection:
    # seconds between the starts of two passes: Prometheus's scrape interval (roles/prometheus
    # prometheus_scrape_interval, 15 s); a pass sooner re-reads the same samples (scrape.py)
    interval: float = field(default=15.0, metadata=limits(ge=0.1, le=3600))
    # host:port of the service's own /metrics; "" serves none
    metrics_address: str = f"127.0.0.1:{DEFAULT_PORT}"
    # present = paused: passes still run and report, drains and resumes are shadow only
    pause_file: str = field(default="/var/lib/opsctl/remediator-paused.json", metadata=limits(path=True))
    # what the last pass saw and did, for `opsctl remediator status`
    status_file: str = field(default="/var/lib/opsctl/remediator-status.json", metadata=limits(path=True))
    alertmanager_url: str = ""  # e.g. http://127.0.0.1:9093; "" sends no alerts
    alertmanager_timeout: float = field(default=5.0, metadata=limits(gt=0, le=60))  # seconds per attempt
    # tries per pass before the send counts as an error
    alertmanager_attempts: int = field(default=3, metadata=limits(ge=1, le=10))
    # seconds an alert stays active after its last send (endsAt = send + this, never under three
    # intervals): it resolves this long after its condition ends or the service stops
    alert_resolve_after: float = field(default=DEFAULT_RESOLVE_AFTER_S, metadata=limits(ge=60, le=86400))

    def validate(self) -> None:
        check_fields(self)
        if self.metrics_address:
            try:
                _, port = split_address(self.metrics_address)
            except ValueError as exc:
                raise ValueError(f"metrics_address: {exc}") from None
            if port is None:
                raise ValueError(f"metrics_address: needs host:port (got {self.metrics_address!r})")
        if self.alertmanager_url and not self.alertmanager_url.startswith(("http://", "https://")):
            raise ValueError(f"alertmanager_url: must start with http:// or https:// "
                             f"(got {self.alertmanager_url!r})")

    def resolve_window(self, interval: float) -> float:
        """Seconds from an alert's send to its endsAt: the setting, and at least three intervals so
        that the next passes re-send it before it ends."""
        return max(self.alert_resolve_after, 3 * interval)

    def metrics_host_port(self) -> tuple[str, int] | None:
        if not self.metrics_address:
            return None
        host, port = split_address(self.metrics_address)
        assert port is not None  # validate() requires one
        return host, port
