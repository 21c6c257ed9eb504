"""Which Debian packages the lab must have on disk so that nodes install them offline.

The Ansible roles name what they install in `roles/<role>/defaults/main.yml` under keys ending in
`_packages`; we read those, plus a baseline the lab always needs, and pre-download them into the
base image.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from opsctl.errors import ConfigError

# What a converged lab runs even before any role declares it (Slurm, munge, monitoring).
BASELINE_PACKAGES: tuple[str, ...] = (
    "munge",
    "slurm-client",
    "slurmctld",
    "slurmd",
    "prometheus",
    "prometheus-node-exporter",
)


def _names(value: Any) -> list[str]:
    """Package names from a `_packages` value: a list of names, or one name; templated items skipped."""
    items: list[Any] = value if isinstance(value, list) else [value]
    out = []
    for item in items:
        if isinstance(item, str):
            name = item.strip()
            # A Jinja expression cannot be resolved without the inventory; the baseline covers it.
            if name and "{{" not in name and " " not in name:
                out.append(name)
    return out


def packages_from_defaults(text: str, source: str = "<defaults>") -> list[str]:
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ConfigError(f"{source}: not valid YAML: {exc}") from None
    if data is None:
        return []
    if not isinstance(data, dict):
        raise ConfigError(f"{source}: expected a mapping of variables")
    out: list[str] = []
    for key, value in data.items():
        if isinstance(key, str) and key.endswith("_packages"):
            out.extend(_names(value))
    return out


def collect_packages(repo_root: Path, baseline: tuple[str, ...] = BASELINE_PACKAGES) -> list[str]:
    """Sorted, de-duplicated package names from every role's defaults plus the baseline."""
    names = set(baseline)
    for defaults in sorted(repo_root.glob("roles/*/defaults/main.yml")):
        names.update(packages_from_defaults(defaults.read_text(), str(defaults)))
    return sorted(names)
