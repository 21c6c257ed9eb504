"""Run a whole training job as processes on this machine: SFT, then inference, trainer ranks and
the orchestrator of the RL stage, each with its log under RUN_DIR/logs/.

No torch here: the launcher only spawns `python -m training.<component>` processes.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from opsctl.errors import ConfigError, UsageError
from opsctl.launch.datasets import check_sft_dataset
from training import config as tconfig
from training.fsutil import is_committed
from training.rundir import RunDir, free_port


def new_run_id() -> str:
    return time.strftime("%Y%m%d-%H%M%S", time.gmtime()) + "-" + secrets.token_hex(3)


def prepare(
    config: str | None, overrides: list[str], output: str | None, resume: bool
) -> tuple[RunDir, tconfig.JobConfig]:
    """Resolve and validate the config and set up the run directory; nothing starts here."""
    if resume:
        if not output:
            raise UsageError("--resume needs --output RUN_DIR of the run to continue")
        run = RunDir(Path(output))
        if not run.config.exists():
            raise UsageError(f"--resume: {run.config} not found")
        if config or overrides:
            raise UsageError("--resume continues with the run's saved config; drop --job/-o")
        try:
            return run, run.load_config()
        except tconfig.ConfigError as exc:
            raise ConfigError(str(exc)) from None
    try:
        cfg = tconfig.load_config(config, overrides)
    except tconfig.ConfigError as exc:
        raise ConfigError(str(exc)) from None
    check_sft_dataset(cfg)
    if cfg.inference.backend == "vllm" and not cfg.inference.urls:
        # Only `opsctl launch` on Slurm starts vLLM; locally the servers must already be running.
        raise ConfigError("inference.urls: --local does not start vLLM; give the running servers' base URLs")
    if not cfg.run_id:
        cfg.run_id = new_run_id()
    run = RunDir(Path(output) if output else Path("runs") / cfg.run_id)
    if run.root.exists() and any(run.root.iterdir()):
        raise UsageError(f"{run.root} already holds a run; use --resume or another --output")
    return run, cfg


def write_config(run: RunDir, cfg: tconfig.JobConfig) -> None:
    run.root.mkdir(parents=True, exist_ok=True)
    tmp = run.root / ".config.toml.tmp"
    tmp.write_text(tconfig.dump_toml(cfg))
    os.rename(tmp, run.config)


@dataclass
class Proc:
    name: str
    popen: subprocess.Popen[bytes]


@dataclass
class LocalLauncher:
    run: RunDir
    cfg: tconfig.JobConfig
    python: str = sys.executable
    procs: list[Proc] = field(default_factory=list)

    def _env(self, extra: dict[str, str] | None = None) -> dict[str, str]:
        env = dict(os.environ)
        env["PYTHONUNBUFFERED"] = "1"
        env.update(extra or {})
        return env

    def spawn(self, name: str, module: str, args: list[str], extra_env: dict[str, str] | None = None) -> Proc:
        self.run.logs.mkdir(parents=True, exist_ok=True)
        log = open(self.run.logs / f"{name}.log", "ab")  # noqa: SIM115 - owned by the child
        argv = [self.python, "-m", module, "--run-dir", str(self.run.root), *args]
        p = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, env=self._env(extra_env))
        log.close()
        proc = Proc(name, p)
        self.procs.append(proc)
        return proc

    def stop_all(self, sig: int = signal.SIGTERM, grace: float = 10.0) -> None:
        for p in self.procs:
            if p.popen.poll() is None:
                p.popen.send_signal(sig)
        deadline = time.monotonic() + grace
        for p in self.procs:
            remaining = max(0.1, deadline - time.monotonic())
            try:
                p.popen.wait(timeout=remaining)
            except subprocess.TimeoutExpired:
                p.popen.kill()
                p.popen.wait()

    def _tail(self, name: str, lines: int = 5) -> str:
        path = self.run.logs / f"{name}.log"
        if not path.exists():
            return ""
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])

    def run_stage(self, name: str, module: str, args: list[str]) -> None:
        proc = self.spawn(name, module, args)
        if proc.popen.wait() != 0:
            raise RuntimeError(f"{name} exited with {proc.popen.returncode}:\n{self._tail(name)}")

    def spawn_ranks(self, name: str, module: str, args: list[str]) -> list[Proc]:
        """trainer.world_size processes of `module`, one process group on this machine."""
        port, world = str(free_port()), self.cfg.trainer.world_size

        def env(r: int) -> dict[str, str]:
            return {"RANK": str(r), "LOCAL_RANK": str(r), "WORLD_SIZE": str(world),
                    "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": port}

        return [self.spawn(f"{name}-{r}", module, args, env(r)) for r in range(world)]

    def run_ranks(self, name: str, module: str) -> None:
        """A stage as every rank; the first that fails stops the others (they would wait on it)."""
        procs = self.spawn_ranks(name, module, [])
        while True:
            codes = [p.popen.poll() for p in procs]
            failed = [p for p, c in zip(procs, codes, strict=True) if c not in (None, 0)]
            if failed:
                for p in procs:
                    if p.popen.poll() is None:
                        p.popen.kill()
                bad = failed[0]
                raise RuntimeError(f"{bad.name} exited with {bad.popen.returncode}:\n{self._tail(bad.name)}")
            if all(c == 0 for c in codes):
                return
            time.sleep(0.2)

    def wait_inference(self, proc: Proc, timeout: float = 600.0) -> None:
        path = self.run.peers / "inference-0.json"
        deadline = time.monotonic() + timeout
        while not path.exists():
            if proc.popen.poll() is not None:
                raise RuntimeError(f"inference exited with {proc.popen.returncode}:\n{self._tail(proc.name)}")
            if time.monotonic() > deadline:
                raise RuntimeError("inference server did not come up")
            time.sleep(0.1)

    def launch(self, resume_step: int) -> int:
        """Run the job to the end; returns 0 when every process finished cleanly, 1 otherwise."""
        shutil.rmtree(self.run.peers, ignore_errors=True)  # addresses of a previous attempt are stale
        try:
            # Also when SFT is off: the stage builds the tiny random model if model.path is empty.
            # Not again once its output is committed: a resumed attempt goes straight to RL.
            sft_out = self.run.sft_output(self.cfg)
            if sft_out is not None and not is_committed(sft_out):
                if self.cfg.sft.enabled and self.cfg.sft.dataset:
                    self.run_ranks("sft", "training.sft")  # chat SFT: on the sharded trainer's ranks
                else:
                    self.run_stage("sft", "training.sft", [])
            # External (vLLM) servers are not ours to start: the orchestrator uses inference.urls.
            inf = None
            if self.cfg.inference.backend == "builtin":
                inf = self.spawn("inference-0", "training.inference", [], {"INFERENCE_INDEX": "0"})
                self.wait_inference(inf)
            resume = ["--resume-step", str(resume_step)] if resume_step else []
            trainers = self.spawn_ranks("trainer", "training.trainer", resume)
            orch = self.spawn("orchestrator", "training.orchestrator", resume)
            workers = [*trainers, orch]
            while True:
                codes = [p.popen.poll() for p in workers]
                failed = [p for p, c in zip(workers, codes, strict=True) if c not in (None, 0)]
                if inf is not None and inf.popen.poll() is not None:
                    failed.append(inf)
                if failed:
                    raise RuntimeError(
                        "; ".join(
                            f"{p.name} exited with {p.popen.returncode}:\n{self._tail(p.name)}"
                            for p in failed
                        )
                    )
                if all(c == 0 for c in codes):
                    return 0
                time.sleep(0.2)
        finally:
            self.stop_all()


def summary(run: RunDir) -> dict[str, object]:
    evals, last = [], {}
    if run.metrics.exists():
        for line in run.metrics.read_text().splitlines():
            rec = json.loads(line)
            if rec.get("event") == "eval":
                evals.append({"step": rec["step"], "env": rec.get("env", ""),
                              "accuracy": rec["eval_accuracy"]})
            elif rec.get("component") == "trainer":
                last = rec
    return {"run_dir": str(run.root), "evals": evals, "last_trainer_step": last.get("step")}
