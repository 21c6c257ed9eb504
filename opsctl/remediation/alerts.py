"""Alerts to Alertmanager (its v2 API, ``POST /api/v2/alerts``).

Every pass re-sends the alerts its decisions raise, stamped when they are sent (``startsAt`` the
send, ``endsAt`` the resolve window after it: ``[remediator] alert_resolve_after``, five minutes by
default, never under three intervals). An alert stays active while the condition holds, however
long a pass takes, and resolves by itself that window after the last pass that saw it; a service
that stops leaves nothing firing for longer, and the dead-man rules
(dashboards/alerts/opsctl-remediation.rules.yml) page about then. Stamping at the pass start
instead made a pass longer than a few intervals post alerts Alertmanager filed as already ended.
Sends retry a bounded number of times; an unreachable Alertmanager is reported to the caller
(counted as an error), never fatal.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from tenacity import retry, retry_if_exception_type, stop_after_attempt, wait_exponential

from opsctl.errors import Unreachable

if TYPE_CHECKING:
    from opsctl.remediation.policy import Decision

# alert code -> (alertname, severity). page: a person now; ticket: a person today.
ALERTS: dict[str, tuple[str, str]] = {
    "storm": ("OpsctlRemediationStorm", "page"),
    "brake": ("OpsctlRemediationBrakeHeld", "ticket"),
    "escalated": ("OpsctlNodeEscalated", "page"),
    "coverage": ("OpsctlRemediationRefused", "page"),
    # a fatal-class node no allowance could drain: latched, still taking jobs (every pass it holds)
    "fatal-held": ("OpsctlFatalNodeInService", "page"),
    # fatal-class nodes drained past the brake or the drain guardrail ([health] fatal_max_drains): a
    # page, as the partition is below its floor and the next fatal fault may be held in service
    "fatal-drain": ("OpsctlFatalDrainPastLimits", "page"),
    # the evidence source lost on every node ([health] unknown_alert_after): nothing is judged or
    # drained (never evidence-lost); one page for the fleet, however long it lasts
    "source-lost": ("OpsctlEvidenceSourceLost", "page"),
    # nodes UNKNOWN for [health] unknown_alert_after: not judged; drained only once a required
    # family is lost for unknown_fail_after (evidence-lost)
    "unknown": ("OpsctlNodeUnknown", "ticket"),
}
OTHER = ("OpsctlRemediationAlert", "ticket")  # an alert code this version does not know yet


def alert_kind(d: Decision) -> str:
    """storm | brake | escalated | coverage | fatal-held | fatal-drain | source-lost | unknown: the
    alert decision's code."""
    return d.code


def _rfc3339(t: float) -> str:
    return datetime.fromtimestamp(t, UTC).isoformat(timespec="seconds").replace("+00:00", "Z")


def build_alerts(decisions: list[Decision], sent_at: float, resolve_after: float, *, host: str = "",
                 mode: str = "") -> list[dict[str, Any]]:
    """The Alertmanager payload for the pass's alert decisions ([] when there are none), to send at
    ``sent_at`` (now: not the pass start) and active until ``resolve_after`` seconds later."""
    out = []
    for d in decisions:
        if d.action != "alert":
            continue
        kind = alert_kind(d)
        name, severity = ALERTS.get(kind, OTHER)
        labels = {"alertname": name, "severity": severity, "code": kind, "nodes": d.node,
                  "service": "opsctl-remediation"}
        annotations = {"summary": d.why}
        if host:
            annotations["source"] = f"opsctl remediator on {host}" + (f" ({mode} mode)" if mode else "")
        out.append({"labels": labels, "annotations": annotations, "startsAt": _rfc3339(sent_at),
                    "endsAt": _rfc3339(sent_at + resolve_after)})
    return out


@dataclass
class AlertmanagerClient:
    url: str  # base URL, e.g. http://127.0.0.1:9093
    timeout: float = 5.0
    attempts: int = 3
    tries: int = field(default=0, init=False)  # attempts made by the last send

    def send(self, alerts: list[dict[str, Any]]) -> None:
        """POST the alerts; Unreachable after ``attempts`` tries (connection errors, timeouts, 5xx)."""
        if not alerts:
            return
        body = json.dumps(alerts).encode()
        endpoint = self.url.rstrip("/") + "/api/v2/alerts"
        self.tries = 0

        @retry(stop=stop_after_attempt(self.attempts), wait=wait_exponential(multiplier=0.2, max=2.0),
               retry=retry_if_exception_type(_Transient), reraise=True)
        def post() -> None:
            self.tries += 1
            req = urllib.request.Request(endpoint, data=body, method="POST",
                                         headers={"Content-Type": "application/json"})
            try:
                with urllib.request.urlopen(req, timeout=self.timeout) as resp:
                    resp.read()
            except urllib.error.HTTPError as exc:
                detail = exc.read()[:200].decode(errors="replace").strip()
                if exc.code >= 500:
                    raise _Transient(f"HTTP {exc.code}: {detail}") from None
                # a 4xx is our payload's fault: retrying sends the same bad payload
                raise Unreachable(f"alertmanager at {self.url} rejected the alerts: HTTP {exc.code}: "
                                  f"{detail}") from None
            except (urllib.error.URLError, OSError) as exc:  # refused, timed out, reset
                raise _Transient(str(getattr(exc, "reason", exc))) from None

        try:
            post()
        except _Transient as exc:
            raise Unreachable(f"alertmanager at {self.url} unreachable after {self.attempts} "
                              f"attempt(s): {exc}") from None


class _Transient(Exception):
    """A failure worth another try."""
