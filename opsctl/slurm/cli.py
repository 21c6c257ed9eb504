"""Slurm through its commands (sinfo, squeue, scontrol, sbatch, scancel), argv lists only.

Reads use the `--json` output when the installed Slurm speaks a format version we have an adapter
for, and the `scontrol -o` text otherwise (or when `cli_format = "text"`).
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Sequence
from types import ModuleType
from typing import Any

from opsctl.errors import ConfigError, Unreachable, UsageError
from opsctl.model import Job, Node, SubmitOptions
from opsctl.nodeset import fold
from opsctl.slurm import openapi_v0038, text
from opsctl.slurm.base import SlurmBackend, SlurmError, attach_jobs, select_nodes

# OpenAPI plugin reported in `meta.plugin.type` -> adapter module.
JSON_ADAPTERS: dict[str, ModuleType] = {openapi_v0038.PLUGIN: openapi_v0038}

_UNREACHABLE_MARKERS = (
    "Unable to contact slurm controller",
    "Socket timed out",
    "Connection refused",
    "Zero Bytes were transmitted or received",
    "Unable to establish controller machine",
    "Communication connection failure",
)


class CliBackend(SlurmBackend):
    name = "cli"

    def __init__(self, slurm_conf: str | None = None, timeout: float = 30.0, fmt: str = "auto") -> None:
        self.env = dict(os.environ)
        if slurm_conf:
            self.env["SLURM_CONF"] = slurm_conf
        self.timeout = timeout
        self.fmt = fmt
        self._adapter: ModuleType | None = None
        self._decided = False

    # -- running commands ------------------------------------------------------------------
    def run(self, argv: list[str], stdin: str | None = None, extra_env: dict[str, str] | None = None) -> str:
        env = {**self.env, **extra_env} if extra_env else self.env
        try:
            proc = subprocess.run(
                argv, input=stdin, capture_output=True, text=True, env=env, timeout=self.timeout,
                check=False,
            )
        except FileNotFoundError:
            raise ConfigError(f"Slurm command not found: {argv[0]} (install slurm-client)") from None
        except subprocess.TimeoutExpired:
            raise Unreachable(f"{argv[0]} timed out after {self.timeout:g}s (is slurmctld up?)") from None
        if proc.returncode != 0:
            message = (proc.stderr or proc.stdout).strip().splitlines()
            first = next((m for m in message if m.strip()), f"exit status {proc.returncode}")
            if any(marker in (proc.stderr or "") for marker in _UNREACHABLE_MARKERS):
                raise Unreachable(f"slurmctld unreachable: {first}")
            if "Invalid job id" in (proc.stderr or ""):
                raise UsageError(f"unknown job: {first}")
            if "Invalid node name" in (proc.stderr or ""):
                raise UsageError(f"unknown node: {first}")
            raise SlurmError(f"{argv[0]} failed: {first}")
        return proc.stdout

    def _json(self, argv: list[str]) -> dict[str, Any]:
        out = self.run(argv)
        try:
            doc = json.loads(out)
        except json.JSONDecodeError as exc:
            raise SlurmError(f"{argv[0]} --json returned invalid JSON: {exc}") from None
        if not isinstance(doc, dict):
            raise SlurmError(f"{argv[0]} --json returned {type(doc).__name__}, not an object")
        errors = doc.get("errors") or []
        if errors:
            # 22.05 exits 0 with an "errors" list (and no data) when slurmctld cannot be reached.
            first = errors[0] if isinstance(errors[0], dict) else {"error": str(errors[0])}
            text = first.get("description") or first.get("error") or "unspecified error"
            raise Unreachable(f"slurmctld unreachable or failing: {argv[0]} --json reported {text!r}")
        return doc

    def adapter(self) -> ModuleType | None:
        """The JSON adapter for this Slurm, or None to use text (decided once per backend)."""
        return self._detect()[0]

    def _detect(self) -> tuple[ModuleType | None, dict[str, Any] | None]:
        """(adapter, the probe's sinfo document when this call ran the probe)."""
        if self.fmt == "text" or self._decided:
            return self._adapter, None
        try:
            doc = self._json(["sinfo", "--json"])
        except SlurmError:
            if self.fmt == "json":
                raise
            doc = {}
        meta_plugin = (doc.get("meta") or {}).get("plugin") or {}
        plugin = str(meta_plugin.get("type", ""))
        adapter = JSON_ADAPTERS.get(plugin)
        if adapter is None and self.fmt == "json":
            # 23.02 and later leave plugin.type empty and name their format in plugin.data_parser
            found = plugin or str(meta_plugin.get("data_parser", ""))
            raise ConfigError(f"no adapter for Slurm JSON format {found!r} (opsctl reads "
                              f"{', '.join(JSON_ADAPTERS)}); use cli_format = text")
        self._adapter, self._decided = adapter, True
        return adapter, (doc if adapter is not None else None)

    # -- reads ------------------------------------------------------------------------------
    def nodes(self, names: Sequence[str] | None = None) -> list[Node]:
        adapter, doc = self._detect()
        if adapter is not None:
            nodes: list[Node] = adapter.parse_sinfo(doc or self._json(["sinfo", "--json"]))
        else:
            nodes = text.parse_nodes(self.run(["scontrol", "-d", "-o", "show", "node"]))
        attach_jobs(nodes, self.jobs())
        return select_nodes(nodes, names)

    def jobs(self) -> list[Job]:
        adapter = self.adapter()
        if adapter is not None:
            jobs: list[Job] = adapter.parse_squeue(self._json(["squeue", "--json"]))
            return jobs
        out = self.run(["scontrol", "-o", "show", "job"])
        return text.parse_jobs(out)

    def job(self, job_id: int) -> Job:
        job_id = _job_id(job_id)
        adapter = self.adapter()
        if adapter is not None:
            for job in adapter.parse_squeue(self._json(["squeue", "--json"])):
                if job.job_id == job_id:
                    return job
            raise UsageError(f"unknown job: {job_id}")
        jobs = text.parse_jobs(self.run(["scontrol", "-o", "show", "job", str(job_id)]))
        for job in jobs:
            if job.job_id == job_id:
                return job
        raise UsageError(f"unknown job: {job_id}")

    # -- changes ----------------------------------------------------------------------------
    def drain(self, names: Sequence[str], reason: str) -> None:
        if not names:
            return
        self.run(["scontrol", "update", f"NodeName={fold(names)}", "State=DRAIN", f"Reason={reason}"])

    def mark_down(self, names: Sequence[str], reason: str) -> None:
        if not names:
            return
        self.run(["scontrol", "update", f"NodeName={fold(names)}", "State=DOWN", f"Reason={reason}"])

    def resume(self, names: Sequence[str]) -> None:
        if not names:
            return
        self.run(["scontrol", "update", f"NodeName={fold(names)}", "State=RESUME"])

    def reboot(self, names: Sequence[str], reason: str) -> None:
        if not names:
            return
        # ASAP: drained (no new jobs) until the reboot; nextstate=RESUME: back in service once its
        # slurmd registers from a new boot (ResumeTimeout bounds the wait, then DOWN)
        self.run(["scontrol", "reboot", "ASAP", "nextstate=RESUME", f"reason={reason}", fold(names)])

    def submit(self, script: str, options: SubmitOptions | None = None) -> int:
        options = options or SubmitOptions()
        argv = ["sbatch", "--parsable", *sbatch_args(options)]
        out = self.run(argv, stdin=script, extra_env=options.environment).strip()
        job_id = out.split(";", 1)[0]
        if not job_id.isdigit():
            raise SlurmError(f"sbatch returned no job id: {out!r}")
        return int(job_id)

    def cancel(self, job_id: int) -> None:
        self.run(["scancel", str(_job_id(job_id))])

    def requeue(self, job_id: int) -> None:
        self.run(["scontrol", "requeue", str(_job_id(job_id))])


def _job_id(job_id: int) -> int:
    if isinstance(job_id, bool) or not isinstance(job_id, int) or job_id <= 0:
        raise UsageError(f"invalid job id: {job_id!r}")
    return job_id


def sbatch_args(options: SubmitOptions) -> list[str]:
    """SubmitOptions -> sbatch long options (each one argv element: nothing reaches a shell)."""
    args: list[str] = []
    if options.job_name:
        args.append(f"--job-name={options.job_name}")
    if options.partition:
        args.append(f"--partition={options.partition}")
    if options.nodes is not None:
        args.append(f"--nodes={options.nodes}")
    if options.nodelist:
        args.append(f"--nodelist={fold(options.nodelist)}")
    if options.exclude:
        args.append(f"--exclude={fold(options.exclude)}")
    if options.requeue is True:
        args.append("--requeue")
    elif options.requeue is False:
        args.append("--no-requeue")
    if options.output:
        args.append(f"--output={options.output}")
    if options.error:
        args.append(f"--error={options.error}")
    if options.chdir:
        args.append(f"--chdir={options.chdir}")
    if options.gres:
        args.append(f"--gres={options.gres}")
    if options.ntasks_per_node is not None:
        args.append(f"--ntasks-per-node={options.ntasks_per_node}")
    if options.time_limit:
        args.append(f"--time={options.time_limit}")
    if options.environment:
        for key in options.environment:
            if not key.isidentifier():
                raise UsageError(f"invalid environment variable name: {key!r}")
        # ALL keeps the submitter's environment; the values travel in sbatch's own environment
        # (below) rather than on its command line, so commas in values are safe.
        args.append("--export=ALL")
    args.extend(options.extra_args)
    return args
