#!/usr/bin/env python3
"""Extract the DCGM name tables the contract tests read (tests/unit/contracts/test_dcgm_names.py)
from upstream git repositories, mechanically, so that the fixtures can be regenerated and checked.

    python scripts/extract_dcgm_fields.py header DCGM_GIT REV [PATH]   # dcgmlib/dcgm_fields.h
    python scripts/extract_dcgm_fields.py go-dcgm GO_DCGM_GIT REV      # go-dcgm's name -> id maps
    python scripts/extract_dcgm_fields.py exporter-names EXPORTER_GIT REV
    python scripts/extract_dcgm_fields.py default-counters EXPORTER_GIT REV
    python scripts/extract_dcgm_fields.py all --dcgm DIR --go-dcgm DIR --exporter DIR [--out DIR] [--check]

Each reads `git -C DIR show REV:path` and prints (or, with `all`, writes) one small text file:

- header: `NAME ID` for every `#define DCGM_FI_<x> <integer>` of DCGM's dcgm_fields.h, and
  `NAME ID TARGET` for a `#define DCGM_FI_<x> DCGM_FI_<y>` (an alias, e.g. a deprecated spelling),
  resolved to its id. Defines with any other value (expressions) are left out.
- go-dcgm: `NAME ID` for go-dcgm's table of current names (`dcgmFields` in pkg/dcgm/const_fields.go,
  `DCGM_FI` in the older pkg/dcgm/const.go) and `NAME ID legacy` for its legacy table
  (`legacyDCGMFields`, `OLD_DCGM_FI`): the names dcgm-exporter accepts in a counters file.
- exporter-names: the `DCGM_EXP_*` names dcgm-exporter declares for its own collectors, with the
  go-dcgm version its go.mod pins in a comment.
- default-counters: `NAME on` or `NAME off` (a commented-out row) for each field row of
  dcgm-exporter's etc/default-counters.csv.

Exit codes: 0 done (or, with --check, the fixtures are up to date), 1 a fixture differs, 2 usage.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
OUT = REPO / "tests" / "fixtures" / "real-world"
HEADER_PATH = "dcgmlib/dcgm_fields.h"
GO_TABLES = (  # file, current map, legacy map (newest layout first)
    ("pkg/dcgm/const_fields.go", "dcgmFields", "legacyDCGMFields"),
    ("pkg/dcgm/const.go", "DCGM_FI", "OLD_DCGM_FI"),
)
EXPORTER_NAME_FILES = ("internal/pkg/counters/const.go", "pkg/dcgmexporter/exporter_metrics.go")

# Every fixture `all` writes: file name, kind, which repository (--dcgm, --go-dcgm, --exporter), rev.
FIXTURES = (
    # DCGM releases the dcgm role supports: the pinned 3.x, the first 4.x with field 1523 (4.5) and
    # the release that renamed it (4.6)
    ("dcgm_fields.DCGM-v3.3.9.txt", "header", "dcgm", "v3.3.9"),
    ("dcgm_fields.DCGM-v4.5.3.txt", "header", "dcgm", "v4.5.3"),
    ("dcgm_fields.DCGM-v4.6.0.txt", "header", "dcgm", "v4.6.0"),
    # go-dcgm as dcgm-exporter 3.3.9-3.6.1 and 4.5.3-4.8.2 pin it in go.mod, and go-dcgm's first
    # release for DCGM 4.6 (no dcgm-exporter release for DCGM 4.6 exists in the snapshot)
    ("dcgm_fields.go-dcgm-3385e277.txt", "go-dcgm", "go-dcgm", "3385e277e49f1dff36b1521cba90951b3862cab6"),
    ("dcgm_fields.go-dcgm-ec245c09.txt", "go-dcgm", "go-dcgm", "ec245c09fe3e26c559b0021a6884dd1ce2ebb4ca"),
    ("dcgm_fields.go-dcgm-v1.4601.0.txt", "go-dcgm", "go-dcgm", "v1.4601.0"),
    ("dcgm-exporter.exporter-names.3.3.9-3.6.1.txt", "exporter-names", "exporter", "3.3.9-3.6.1"),
    ("dcgm-exporter.exporter-names.4.5.3-4.8.2.txt", "exporter-names", "exporter", "4.5.3-4.8.2"),
    ("dcgm-exporter.default-counters.names.3.3.9-3.6.1.txt", "default-counters", "exporter", "3.3.9-3.6.1"),
    ("dcgm-exporter.default-counters.names.4.5.3-4.8.2.txt", "default-counters", "exporter", "4.5.3-4.8.2"),
)

_DEFINE = re.compile(r"^\s*#\s*define\s+(DCGM_FI_\w+)\s+(.*?)\s*(?://.*|/\*.*)?$")
_GO_ENTRY = re.compile(r'^\s*"([A-Za-z0-9_]+)"\s*:\s*([A-Za-z0-9_]+)\s*,')
_GO_CONST = re.compile(r"^\s*([A-Z][A-Z0-9_]+)\s+(?:Short\s+)?=\s*(\d+)\s*$")
_EXP_NAME = re.compile(r'^\s*\w+\s*=\s*"(DCGM_EXP_[A-Z0-9_]+)"')
_CSV_ROW = re.compile(r"^(#?)\s*(DCGM_[A-Z0-9_]+)\s*,")
_GO_MOD = re.compile(r"^\s*github\.com/NVIDIA/go-dcgm\s+(\S+)", re.M)


class ExtractError(Exception):
    pass


def git_show(repo: str, rev: str, path: str) -> str:
    proc = subprocess.run(["git", "-C", repo, "show", f"{rev}:{path}"], capture_output=True, text=True)
    if proc.returncode != 0:
        raise ExtractError(f"git show {rev}:{path} in {repo}: {proc.stderr.strip()}")
    return proc.stdout


def commit_of(repo: str, rev: str) -> str:
    proc = subprocess.run(
        ["git", "-C", repo, "rev-parse", f"{rev}^{{commit}}"], capture_output=True, text=True
    )
    if proc.returncode != 0:
        raise ExtractError(f"no commit {rev} in {repo}: {proc.stderr.strip()}")
    return proc.stdout.strip()


def first_file(repo: str, rev: str, paths: tuple[str, ...]) -> tuple[str, str]:
    for path in paths:
        try:
            return path, git_show(repo, rev, path)
        except ExtractError:
            continue
    raise ExtractError(f"none of {', '.join(paths)} at {rev} in {repo}")


def _provenance(upstream: str, rev: str, commit: str, path: str) -> list[str]:
    at = rev if rev == commit else f"{rev} ({commit})"
    return [
        f"# {upstream} @ {at} : {path}",
        "# extracted by scripts/extract_dcgm_fields.py (do not edit; regenerate)",
    ]


def header_table(text: str) -> list[str]:
    """`NAME ID` and `NAME ID TARGET` (alias) lines of dcgm_fields.h's DCGM_FI_ defines, by name."""
    values: dict[str, str] = {}
    for line in text.splitlines():
        if m := _DEFINE.match(line):
            values[m.group(1)] = m.group(2).strip()

    def resolve(name: str, seen: tuple[str, ...] = ()) -> int | None:
        value = values.get(name)
        if value is None or name in seen:
            return None
        if value.isdigit():
            return int(value)
        if re.fullmatch(r"DCGM_FI_\w+", value):
            return resolve(value, (*seen, name))
        return None

    out = []
    for name in sorted(values):
        ident = resolve(name)
        if ident is None:
            continue
        value = values[name]
        out.append(f"{name} {ident}" if value.isdigit() else f"{name} {ident} {value}")
    return out


def _go_map(text: str, var: str) -> dict[str, str]:
    lines = text.splitlines()
    start = next(
        (
            i
            for i, line in enumerate(lines)
            if re.match(rf"^\s*(?:var\s+)?{var}\s*=\s*map\[string\]Short\{{", line)
        ),
        None,
    )
    if start is None:
        raise ExtractError(f"no map {var}")
    out: dict[str, str] = {}
    for line in lines[start + 1 :]:
        if re.match(r"^\s*\}", line):
            return out
        if m := _GO_ENTRY.match(line):
            out[m.group(1)] = m.group(2)
    raise ExtractError(f"map {var} does not end")


def go_table(text: str, current: str, legacy: str) -> list[str]:
    """`NAME ID` (current) and `NAME ID legacy` lines of go-dcgm's maps, by name; values that are
    constants are resolved through the file's `NAME [Short] = N` declarations."""
    consts = {m.group(1): m.group(2) for line in text.splitlines() if (m := _GO_CONST.match(line))}
    out = []
    for var, tag in ((current, ""), (legacy, " legacy")):
        for name, value in sorted(_go_map(text, var).items()):
            ident = value if value.isdigit() else consts.get(value)
            if ident is not None:  # Short('b') and the like: field types, not ids
                out.append(f"{name} {int(ident)}{tag}")
    return out


def extract(kind: str, repo: str, rev: str, path: str | None = None) -> str:
    commit = commit_of(repo, rev)
    if kind == "header":
        path = path or HEADER_PATH
        lines = _provenance("NVIDIA/DCGM", rev, commit, path) + header_table(git_show(repo, rev, path))
    elif kind == "go-dcgm":
        for file, current, legacy in GO_TABLES:
            try:
                text = git_show(repo, rev, file)
            except ExtractError:
                continue
            lines = _provenance("NVIDIA/go-dcgm", rev, commit, file) + go_table(text, current, legacy)
            break
        else:
            raise ExtractError(f"no go-dcgm field table at {rev}")
    elif kind == "exporter-names":
        file, text = first_file(repo, rev, EXPORTER_NAME_FILES)
        pin = _GO_MOD.search(git_show(repo, rev, "go.mod"))
        names = sorted({m.group(1) for line in text.splitlines() if (m := _EXP_NAME.match(line))})
        lines = _provenance("NVIDIA/dcgm-exporter", rev, commit, file)
        lines += [f"# go.mod: github.com/NVIDIA/go-dcgm {pin.group(1) if pin else '(none)'}", *names]
    elif kind == "default-counters":
        file = "etc/default-counters.csv"
        rows = [m for line in git_show(repo, rev, file).splitlines() if (m := _CSV_ROW.match(line))]
        lines = _provenance("NVIDIA/dcgm-exporter", rev, commit, file)
        lines += [f"{m.group(2)} {'off' if m.group(1) else 'on'}" for m in rows]
    else:
        raise ExtractError(f"unknown kind {kind}")
    return "\n".join(lines) + "\n"


def regenerate(repos: dict[str, str], out: Path, check: bool, log: Callable[[str], None]) -> int:
    stale = 0
    for name, kind, which, rev in FIXTURES:
        text = extract(kind, repos[which], rev)
        path = out / name
        if check:
            if not path.exists() or path.read_text() != text:
                log(f"differs: {path}")
                stale += 1
        elif not path.exists() or path.read_text() != text:
            path.write_text(text)
            log(f"wrote {path}")
    return 1 if stale else 0


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="kind", required=True)
    for kind in ("header", "go-dcgm", "exporter-names", "default-counters"):
        p = sub.add_parser(kind)
        p.add_argument("repo", help="a git directory (a bare mirror will do)")
        p.add_argument("rev", help="tag or commit")
        if kind == "header":
            p.add_argument("path", nargs="?", default=HEADER_PATH)
    p = sub.add_parser("all", help="write (or --check) every fixture of FIXTURES")
    p.add_argument("--dcgm", required=True, help="NVIDIA/DCGM git directory")
    p.add_argument("--go-dcgm", required=True, help="NVIDIA/go-dcgm git directory")
    p.add_argument("--exporter", required=True, help="NVIDIA/dcgm-exporter git directory")
    p.add_argument("--out", type=Path, default=OUT)
    p.add_argument("--check", action="store_true", help="compare instead of writing")
    args = parser.parse_args(argv)
    try:
        if args.kind == "all":
            repos = {"dcgm": args.dcgm, "go-dcgm": args.go_dcgm, "exporter": args.exporter}
            return regenerate(repos, args.out, args.check, lambda s: print(s, file=sys.stderr))
        sys.stdout.write(extract(args.kind, args.repo, args.rev, getattr(args, "path", None)))
    except ExtractError as e:
        print(f"extract_dcgm_fields: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
