"""`python -m training.envs.check`: load a vf: environment as the job will and score reference
answers with its rubric, in the training runtime's interpreter; `opsctl launch` runs it before it
creates or submits anything.

    python -m training.envs.check --name vf:ID [--kwargs JSON] [--path DIR]... [--examples N]

Exit 0 with one summary line on stdout; exit 2 with one line on stdout, "error: " then what is
wrong, naming the environment (stderr may hold an environment's own noise).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from training.envs.verifiers_env import EnvLoadError, check_scoring, load

EXIT_BAD_ENV = 2


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="training.envs.check")
    ap.add_argument("--name", required=True)
    ap.add_argument("--kwargs", default="{}", help="env.kwargs as a JSON object")
    ap.add_argument("--path", action="append", default=[], help="searched first for the package")
    ap.add_argument("--examples", type=int, default=4, help="reference answers to score (0: none)")
    args = ap.parse_args(argv)
    try:
        kwargs = json.loads(args.kwargs)
        if not isinstance(kwargs, dict):
            raise ValueError("not a JSON object")
    except ValueError as exc:
        print(f"error: env.kwargs: {exc}")
        return EXIT_BAD_ENV
    try:
        env = load(args.name, kwargs, [Path(p) for p in args.path])
        check_scoring(env, args.examples)
    except EnvLoadError as exc:
        print(f"error: {exc}")
        return EXIT_BAD_ENV
    print(f"env {env.name}: {len(env.rows)} training rows, {len(env.eval_rows)} held-out, "
          f"{min(args.examples, len(env.rows))} reference answers scored")
    return 0


if __name__ == "__main__":
    code = main()
    sys.stdout.flush()
    # Skip exit handlers: a half-built environment's teardown (verifiers registers one) may raise or
    # reach for a network after the verdict is out.
    os._exit(code)
