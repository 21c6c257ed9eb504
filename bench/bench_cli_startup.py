"""CLI startup: median wall time of `opsctl --help` over N runs, against bare `python -c pass`,
and the heavy modules (torch, transformers, pandas, prometheus_api_client) an import pulls in.

    python bench/bench_cli_startup.py [--runs 20] [--json]

Exits 1 if importing the CLI loads a heavy module (that is a regression whatever the timing).
"""

from __future__ import annotations

import argparse
import json
import platform
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

HEAVY = ("torch", "transformers", "pandas", "prometheus_api_client")


def median_seconds(argv: list[str], runs: int) -> float:
    samples = []
    for _ in range(runs):
        start = time.perf_counter()
        subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
        samples.append(time.perf_counter() - start)
    return statistics.median(samples)


def heavy_modules_loaded() -> list[str]:
    probe = "import sys, json, opsctl.cli; print(json.dumps(sorted(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    loaded = set(json.loads(out.stdout))
    return [m for m in HEAVY if m in loaded]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    opsctl = str(Path(sys.executable).parent / "opsctl")
    if not Path(opsctl).exists():
        opsctl = shutil.which("opsctl") or "opsctl"
    subprocess.run([opsctl, "--help"], stdout=subprocess.DEVNULL, check=True)  # warm the page cache
    help_s = median_seconds([opsctl, "--help"], args.runs)
    base_s = median_seconds([sys.executable, "-c", "pass"], args.runs)
    heavy = heavy_modules_loaded()
    result = {
        "bench": "cli_startup",
        "command": "opsctl --help",
        "runs": args.runs,
        "median_s": round(help_s, 4),
        "baseline": "python -c pass",
        "baseline_median_s": round(base_s, 4),
        "ratio": round(help_s / base_s, 2),
        "heavy_modules_imported": heavy,
        "machine": f"{platform.node()} {platform.machine()} {platform.python_version()}, "
                   f"{len(__import__('os').sched_getaffinity(0))} cpus",
    }
    if args.json:
        print(json.dumps(result))
    else:
        print(f"opsctl --help: median {help_s * 1000:.0f} ms over {args.runs} runs "
              f"(python -c pass: {base_s * 1000:.0f} ms, ratio {help_s / base_s:.1f}x); "
              f"heavy modules imported: {', '.join(heavy) or 'none'}")
    return 1 if heavy else 0


if __name__ == "__main__":
    sys.exit(main())
