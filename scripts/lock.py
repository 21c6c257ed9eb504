#!/usr/bin/env python3
"""Lock files: the exact Python package versions each platform installs.

    python scripts/lock.py refresh [cpu|cuda ...]   # resolve pyproject again, rewrite locks/<platform>.txt
    python scripts/lock.py check [--installed]      # the locks agree with pyproject (and this environment)

Two platforms matter:
- cpu: development, CI and the lab's training runtime (Debian 12: CPython 3.11, x86_64; PyTorch's CPU
  build). Resolved with this machine's own pip configuration (index, find-links), so the lock holds
  what `scripts/bootstrap.sh` would install here, plus the dev tools and the build backend.
- cuda: the training runtime on the GPU nodes (CPython 3.11, manylinux x86_64 up to glibc 2.36, the
  torch wheel from PyPI with its CUDA libraries). Resolved from LOCK_INDEX_URL (default PyPI) for that
  interpreter and platform, whatever this machine is, ignoring local pip configuration.

pip resolves (`pip install --dry-run --report`); a lock is a pip constraints file of `name==version`
lines whose header records a digest of the pyproject inputs it was resolved from, so `check` notices
a dependency changed in pyproject without a refresh. Exit codes: 0 agree, 1 disagree, 2 usage error.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import subprocess
import sys
import tempfile
import tomllib
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

ROOT = Path(__file__).resolve().parents[1]
PYPROJECT = ROOT / "pyproject.toml"
LOCKS = ROOT / "locks"
DIGEST_PREFIX = "# inputs-sha256: "
PYTHON = "3.11"  # Debian 12's interpreter: the CI machines, the lab machines and the GPU nodes
# Wheels a Debian 12 x86_64 node can install (glibc 2.36).
MANYLINUX = [f"manylinux_2_{minor}_x86_64" for minor in range(36, 16, -1)] + [
    "manylinux2014_x86_64",
    "linux_x86_64",
]


@dataclass(frozen=True)
class Platform:
    name: str
    extras: tuple[str, ...]  # pyproject extras installed there besides the dependencies
    tools: tuple[str, ...]  # installed there too: the installer and the build backend
    about: tuple[str, str]  # the header's two lines
    cross: bool  # resolved for the target interpreter and platform, not this machine

    @property
    def path(self) -> Path:
        return LOCKS / f"{self.name}.txt"


PLATFORMS = {
    "cpu": Platform(
        "cpu",
        ("dev", "training"),
        ("pip",),
        (
            "for development, CI and the lab's training runtime:",
            "CPython 3.11 on x86_64 Linux; torch is PyTorch's CPU build.",
        ),
        cross=False,
    ),
    "cuda": Platform(
        "cuda",
        ("training",),
        (),
        (
            "for the training runtime on the GPU nodes:",
            "CPython 3.11, manylinux x86_64 (glibc <= 2.36); torch is the index's CUDA build.",
        ),
        cross=True,
    ),
}


class LockError(Exception):
    """Usage or environment problem: exit 2 with this one line."""


# -- inputs ---------------------------------------------------------------------------------------
def inputs(plat: Platform, pyproject: Path = PYPROJECT) -> list[str]:
    """The requirements a platform's lock is resolved from, in pyproject order."""
    data = tomllib.loads(pyproject.read_text())
    project = data["project"]
    reqs = list(project.get("dependencies", []))
    for extra in plat.extras:
        reqs += project.get("optional-dependencies", {}).get(extra, [])
    if not plat.cross:  # the editable install builds the project here with its build backend
        reqs += data.get("build-system", {}).get("requires", [])
    return reqs + list(plat.tools)


def digest(reqs: list[str]) -> str:
    normalised = sorted(str(Requirement(r)) for r in reqs)
    return hashlib.sha256(json.dumps(normalised).encode()).hexdigest()


# -- reading a lock -------------------------------------------------------------------------------
@dataclass
class Lock:
    pins: dict[str, Version]  # canonical name -> exact version
    names: dict[str, str]  # canonical name -> name as written
    inputs_sha256: str


def read_lock(path: Path) -> Lock:
    if not path.is_file():
        raise LockError(f"{path.relative_to(ROOT)}: missing; run `make lock`")
    pins: dict[str, Version] = {}
    names: dict[str, str] = {}
    sha = ""
    for n, raw in enumerate(path.read_text().splitlines(), 1):
        line = raw.strip()
        if line.startswith(DIGEST_PREFIX):
            sha = line[len(DIGEST_PREFIX) :].strip()
            continue
        if not line or line.startswith("#"):
            continue
        name, sep, version = line.partition("==")
        try:
            if not sep:
                raise InvalidVersion(line)
            key = canonicalize_name(name.strip())
            pins[key] = Version(version.strip())
            names[key] = name.strip()
        except InvalidVersion as exc:
            raise LockError(f"{path.relative_to(ROOT)}:{n}: expected name==version, got {line!r}") from exc
    return Lock(pins, names, sha)


# -- resolving ------------------------------------------------------------------------------------
def pip_argv(
    plat: Platform, reqfile: Path, report: Path, target: Path, keep: Path | None = None
) -> list[str]:
    """pip's dry run for the platform; ``keep``: the current lock as constraints, so every package
    it pins stays at its version and only what is new gets resolved."""
    argv = [sys.executable, "-m", "pip"]
    if plat.cross:
        argv.append("--isolated")  # no pip.conf or PIP_* variables: the index alone decides
    argv += ["install", "--dry-run", "--ignore-installed", "--quiet", "--report", str(report)]
    if plat.cross:
        argv += ["--index-url", os.environ.get("LOCK_INDEX_URL", "https://pypi.org/simple")]
        argv += ["--python-version", PYTHON, "--implementation", "cp", "--only-binary=:all:"]
        for tag in MANYLINUX:
            argv += ["--platform", tag]
        argv += ["--target", str(target)]
    if keep is not None:
        argv += ["--constraint", str(keep)]
    return [*argv, "--requirement", str(reqfile)]


def resolve(plat: Platform, reqs: list[str], keep: bool = False) -> dict[str, str]:
    """name -> version of every distribution pip would install for `reqs` on the platform; with
    ``keep``, at the current lock's versions wherever it has the package."""
    if not plat.cross:
        here = f"{sys.version_info.major}.{sys.version_info.minor}"
        if here != PYTHON or sys.platform != "linux" or platform.machine() != "x86_64":
            raise LockError(
                f"the {plat.name} lock is resolved on its own platform (CPython {PYTHON}, x86_64 Linux); "
                f"this is CPython {here} on {sys.platform}/{platform.machine()}"
            )
    with tempfile.TemporaryDirectory(prefix="opsctl-lock-") as tmp:
        reqfile, report = Path(tmp, "in.txt"), Path(tmp, "report.json")
        reqfile.write_text("\n".join(reqs) + "\n")
        proc = subprocess.run(
            pip_argv(plat, reqfile, report, Path(tmp, "target"), plat.path if keep else None),
            capture_output=True,
            text=True,
        )
        if proc.returncode != 0:
            errors = [ln for ln in proc.stderr.splitlines() if ln.startswith("ERROR")] or [proc.stderr[-400:]]
            hint = " (a kept pin conflicts: refresh without --keep)" if keep else ""
            raise LockError(f"pip could not resolve the {plat.name} platform{hint}: {errors[-1].strip()}")
        installs = json.loads(report.read_text())["install"]
    return {i["metadata"]["name"]: i["metadata"]["version"] for i in installs}


def render(plat: Platform, reqs: list[str], resolved: dict[str, str]) -> str:
    head = [
        f"# locks/{plat.name}.txt: the exact version of every Python package {plat.about[0]}",
        f"# {plat.about[1]}",
        "# Written by `make lock` (python scripts/lock.py refresh); a pip constraints file: do not edit.",
        f"{DIGEST_PREFIX}{digest(reqs)}",
    ]
    body = [f"{name}=={resolved[name]}" for name in sorted(resolved, key=canonicalize_name)]
    return "\n".join(head + body) + "\n"


def refresh(names: list[str], keep: bool = False) -> None:
    for name in names:
        plat = PLATFORMS[name]
        reqs = inputs(plat)
        if keep and not plat.path.is_file():
            where = plat.path.relative_to(ROOT)
            raise LockError(f"{where}: missing, nothing to keep; refresh without --keep")
        text = render(plat, reqs, resolve(plat, reqs, keep))
        LOCKS.mkdir(exist_ok=True)
        tmp = plat.path.with_suffix(".tmp")
        tmp.write_text(text)
        os.replace(tmp, plat.path)
        print(f"{plat.path.relative_to(ROOT)}: {len(text.splitlines()) - 4} packages")


# -- checking -------------------------------------------------------------------------------------
def disagreements(plat: Platform, lock: Lock, pyproject: Path = PYPROJECT) -> list[str]:
    """Why a lock no longer matches pyproject; empty when it does."""
    where = f"locks/{plat.name}.txt"
    reqs = inputs(plat, pyproject)
    problems = []
    if lock.inputs_sha256 != digest(reqs):
        problems.append(f"{where}: resolved from other pyproject requirements than today's; run `make lock`")
    for raw in reqs:
        req = Requirement(raw)
        if req.marker is not None and not req.marker.evaluate({"python_version": PYTHON}):
            continue
        pin = lock.pins.get(canonicalize_name(req.name))
        if pin is None:
            problems.append(f"{where}: {req.name} is required by pyproject but not pinned; run `make lock`")
        elif not req.specifier.contains(pin, prereleases=True):
            problems.append(
                f"{where}: {req.name}=={pin} does not satisfy pyproject's {raw!r}; run `make lock`"
            )
    return problems


def installed_mismatches(lock: Lock) -> list[str]:
    """Pinned packages this environment lacks or holds at another version (the cpu lock only)."""
    have: dict[str, str] = {
        canonicalize_name(d.metadata["Name"]): d.version for d in metadata.distributions()
    }
    problems = []
    for key, pin in sorted(lock.pins.items()):
        got = have.get(key)
        if got is None:
            problems.append(f"{lock.names[key]}: pinned {pin}, not installed")
        elif Version(got) != pin:
            problems.append(f"{lock.names[key]}: pinned {pin}, installed {got}")
    return problems


def check(installed: bool) -> int:
    problems: list[str] = []
    for plat in PLATFORMS.values():
        problems += disagreements(plat, read_lock(plat.path))
    if installed:
        problems += [
            f"this environment: {p} (run scripts/bootstrap.sh)"
            for p in installed_mismatches(read_lock(PLATFORMS["cpu"].path))
        ]
    for p in problems:
        print(p)
    if not problems:
        print("locks agree with pyproject" + (" and this environment" if installed else ""))
    return 1 if problems else 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="scripts/lock.py", description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    ref = sub.add_parser("refresh", help="resolve pyproject again and rewrite the locks")
    ref.add_argument(
        "platforms", nargs="*", metavar="PLATFORM", help=f"one of {', '.join(PLATFORMS)} (default: all)"
    )
    ref.add_argument(
        "--keep",
        action="store_true",
        help="keep every pin of the current lock; resolve only what pyproject added",
    )
    chk = sub.add_parser("check", help="the locks agree with pyproject")
    chk.add_argument("--installed", action="store_true", help="and this environment holds the cpu lock")
    args = ap.parse_args(argv)
    try:
        if args.cmd == "refresh":
            unknown = [p for p in args.platforms if p not in PLATFORMS]
            if unknown:
                raise LockError(f"unknown platform {unknown[0]!r}: one of {', '.join(PLATFORMS)}")
            refresh(args.platforms or list(PLATFORMS), args.keep)
            return 0
        return check(args.installed)
    except (LockError, InvalidRequirement) as exc:
        print(f"lock: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
