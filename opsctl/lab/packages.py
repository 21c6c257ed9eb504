"""Which Debian packages the lab must have on disk so that nodes install them offline, and the
lab's own small apt repository (simulated packages a rolling update can bump).

The Ansible roles name what they install in `roles/<role>/defaults/main.yml` under keys ending in
`_packages`; we read those, plus a baseline the lab always needs, and pre-download them into the
base image.
"""

from __future__ import annotations

import hashlib
import re
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

from opsctl.errors import ConfigError
from opsctl.lab.shell import run

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


# -- the lab's local apt repository -------------------------------------------------------------
# Packages the lab makes itself (the simulated driver a rolling update bumps) live in a flat apt
# repository under the state dir, bind-mounted read-only into every machine. The machines have no
# route out, so this is the one source they can refresh.
LOCAL_REPO_MOUNT = "/srv/opsctl-lab-repo"
LOCAL_SOURCES_FILE = "opsctl-lab.list"  # under /etc/apt/sources.list.d in every machine
_NAME_RE = re.compile(r"^[a-z0-9][a-z0-9+.-]+$")
_VERSION_RE = re.compile(r"^[0-9][A-Za-z0-9.+~-]*$")


def render_sources_list() -> str:
    return (
        "# opsctl lab: the lab's own packages (a flat repository on the host, bind-mounted read-only).\n"
        f"deb [trusted=yes] file:{LOCAL_REPO_MOUNT} ./\n"
    )


def build_sim_package(repo: Path, name: str, version: str, description: str = "") -> Path:
    """A tiny architecture-independent .deb ``<name>_<version>_all.deb`` in ``repo``.

    It installs ``/usr/share/opsctl-labsim/<name>/VERSION`` (the version, so a test can read what
    the machine runs) and nothing else. The index is not rewritten; call write_repo_index.
    """
    if not _NAME_RE.match(name):
        raise ConfigError(f"package name {name!r}: lower-case letters, digits, '+', '-' and '.' only")
    if not _VERSION_RE.match(version):
        raise ConfigError(f"package version {version!r} is not a Debian version")
    repo.mkdir(parents=True, exist_ok=True)
    out = repo / f"{name}_{version}_all.deb"
    with tempfile.TemporaryDirectory(prefix="opsctl-deb-") as tmp:
        root = Path(tmp) / "root"
        payload = root / "usr/share/opsctl-labsim" / name
        payload.mkdir(parents=True)
        (payload / "VERSION").write_text(version + "\n")
        control = root / "DEBIAN"
        control.mkdir()
        (control / "control").write_text(
            f"Package: {name}\n"
            f"Version: {version}\n"
            "Architecture: all\n"
            "Maintainer: opsctl lab <lab@opsctl.invalid>\n"
            "Section: misc\n"
            "Priority: optional\n"
            f"Description: {description or 'SIMULATED package of the opsctl lab'}\n"
            " Built by opsctl lab; stands in for a pinned vendor package (a GPU driver) in tests.\n"
        )
        for d in (root, *root.rglob("*")):
            if d.is_dir():
                d.chmod(0o755)
        run(["dpkg-deb", "--root-owner-group", "-Zgzip", "--build", root, out])
    out.chmod(0o644)
    return out


def _hashes(data: bytes) -> dict[str, str]:
    return {
        "MD5sum": hashlib.md5(data).hexdigest(),  # apt's index format, not a security use
        "SHA256": hashlib.sha256(data).hexdigest(),
    }


def write_repo_index(repo: Path) -> Path:
    """(Re)write ``Packages`` and ``Release`` of the flat repository from the .deb files in it."""
    repo.mkdir(parents=True, exist_ok=True)
    stanzas = []
    for deb in sorted(repo.glob("*.deb")):
        fields = run(["dpkg-deb", "--field", deb]).stdout.rstrip("\n")
        data = deb.read_bytes()
        sums = _hashes(data)
        stanzas.append(
            f"{fields}\nFilename: ./{deb.name}\nSize: {len(data)}\n"
            f"MD5sum: {sums['MD5sum']}\nSHA256: {sums['SHA256']}\n"
        )
    packages = "\n".join(stanzas).encode()
    (repo / "Packages").write_bytes(packages)
    sums = _hashes(packages)
    date = time.strftime("%a, %d %b %Y %H:%M:%S UTC", time.gmtime())
    (repo / "Release").write_text(
        "Origin: opsctl-lab\nLabel: opsctl-lab\nSuite: lab\nCodename: lab\n"
        f"Date: {date}\nArchitectures: all amd64\n"
        f"MD5Sum:\n {sums['MD5sum']} {len(packages)} Packages\n"
        f"SHA256:\n {sums['SHA256']} {len(packages)} Packages\n"
    )
    for f in (repo, repo / "Packages", repo / "Release"):
        f.chmod(0o755 if f.is_dir() else 0o644)
    return repo / "Packages"
