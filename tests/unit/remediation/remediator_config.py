"""The opsctl.toml the remediation unit tests run a service with: the CLI Slurm backend, a
Prometheus URL, state and logs in the working directory, no metrics endpoint unless asked for."""

from __future__ import annotations

import socket
from pathlib import Path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def write_config(tmp_path: Path, prometheus_url: str = "", remediator: str = "") -> Path:
    """tmp_path/opsctl.toml; ``prometheus_url`` defaults to a port nothing listens on, and
    ``remediator`` holds extra lines of the [remediator] section."""
    path = tmp_path / "opsctl.toml"
    path.write_text(f"""
[slurm]
backend = "cli"
[prometheus]
url = "{prometheus_url or f'http://127.0.0.1:{free_port()}'}"
[audit]
log = "audit.jsonl"
[health]
nodes = "gpu-[001-004]"
state_file = "state.json"
decision_log = "decisions.jsonl"
[remediator]
pause_file = "paused.json"
status_file = "status.json"
{remediator}
""")
    return path
