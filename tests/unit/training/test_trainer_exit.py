"""The trainer's exit path skips interpreter teardown (os._exit) so torch's gloo teardown cannot
turn a finished rank into SIGABRT; what it writes before that must still reach the pipes, and the
metrics file must be closed with every record in it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]


def test_finish_exits_zero_after_flushing_output_and_closing_metrics(tmp_path: Path) -> None:
    script = textwrap.dedent(
        f"""
        import logging
        from pathlib import Path
        from training.metrics import Metrics
        from training.rundir import RunDir
        from training.trainer.__main__ import finish

        logging.basicConfig(level=logging.INFO)
        run = RunDir(Path({str(tmp_path)!r}))
        metrics = Metrics(run, "trainer", port=None)
        metrics.log({{"step": 7, "loss": 0.5}})
        print("stdout line before finish")  # a pipe: block-buffered, lost unless flushed
        logging.getLogger("trainer").info("done at step 7")
        finish(1, metrics)
        raise SystemExit(5)  # never reached
        """
    )
    env = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}  # as under srun
    proc = subprocess.run(
        [sys.executable, "-c", script],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert "stdout line before finish" in proc.stdout
    assert "done at step 7" in proc.stderr
    records = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [(r["component"], r["step"]) for r in records] == [("trainer", 7)]
