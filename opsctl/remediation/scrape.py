"""The pass interval against Prometheus's scrape interval.

A pass reads evidence that changes once a scrape: passes more often than that re-read the same
samples (policy counts them as one clean observation) and read Slurm for nothing. The default
interval is the provisioned scrape interval (roles/prometheus: ``prometheus_scrape_interval``,
15 s); where the service can ask Prometheus for its configuration, a shorter interval is warned
about at start.
"""

from __future__ import annotations

import json
import re
import urllib.request
from typing import Any

import yaml

PROMETHEUS_DEFAULT_SCRAPE_S = 60.0  # Prometheus's own default for global.scrape_interval
_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, "w": 604800.0, "y": 31536000.0}
_PART = re.compile(r"(\d+)(ms|s|m|h|d|w|y)")


def parse_duration(text: str) -> float:
    """A Prometheus duration (``15s``, ``1m30s``, ``500ms``) in seconds; ValueError otherwise."""
    parts = _PART.findall(text)
    if not text or "".join(n + u for n, u in parts) != text:
        raise ValueError(f"not a Prometheus duration: {text!r}")
    return sum(int(n) * _UNITS[u] for n, u in parts)


def shortest_scrape_interval(config: dict[str, Any]) -> float:
    """The shortest scrape interval of a prometheus.yml: each job's own, else the global one."""
    default = (config.get("global") or {}).get("scrape_interval")
    base = parse_duration(str(default)) if default else PROMETHEUS_DEFAULT_SCRAPE_S
    jobs = config.get("scrape_configs") or []
    own = [parse_duration(str(j["scrape_interval"])) for j in jobs if j.get("scrape_interval")]
    return min([*own, base] if len(own) < len(jobs) or not jobs else own)


def scrape_interval(prometheus_url: str, timeout: float = 3.0) -> float:
    """Ask Prometheus (``/api/v1/status/config``) for its shortest scrape interval."""
    url = prometheus_url.rstrip("/") + "/api/v1/status/config"
    with urllib.request.urlopen(url, timeout=timeout) as resp:  # an http(s) URL from config
        doc = json.loads(resp.read().decode("utf-8"))
    config = yaml.safe_load(doc["data"]["yaml"]) or {}
    return shortest_scrape_interval(config)


def interval_warning(interval: float, scrape: float) -> str:
    """Why ``interval`` is too short for ``scrape`` ("" when it is not)."""
    if interval >= scrape:
        return ""
    return (f"interval {interval:g}s is shorter than Prometheus's scrape interval ({scrape:g}s): passes "
            "re-read the same samples and read Slurm for nothing; set [remediator] interval to at "
            f"least {scrape:g}")
