"""Environments written with the verifiers library, selected as `env.name = "vf:<env_id>"`.

The environment is loaded through verifiers' classic API (`verifiers.load_environment(env_id,
**env.kwargs)`, verifiers 0.3.x): its package must be importable, either installed into the
training runtime or installed by `opsctl launch` into the run's own `environments/` directory
(`env.packages`), which is put first on the import path here. The environment drives its own
rollouts (single-turn, multi-turn, tools) through an OpenAI-compatible chat client;
training/orchestrator/vf_rollouts.py points that client at the run's inference servers.

Every failure to load is an `EnvLoadError` whose message is one line naming the environment, so
that `opsctl launch` can refuse the run before anything starts.
"""

from __future__ import annotations

import asyncio
import logging
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from training.envs.base import Task

PREFIX = "vf:"
ENV_DIR = "environments"  # under the run directory: where `opsctl launch` installs env.packages


class EnvLoadError(ValueError):
    """The environment could not be loaded or failed its launch check; the message is one line."""


def is_verifiers(name: str) -> bool:
    return name.startswith(PREFIX)


@dataclass
class VerifiersEnvironment:
    name: str  # "vf:<env_id>", as configured
    env_id: str
    vf_env: Any  # the verifiers Environment
    rows: list[dict[str, Any]]  # rollout inputs (prompt messages, answer, info, example_id)
    eval_rows: list[dict[str, Any]]
    dataset: list[Task] = field(default_factory=list)  # the same rows, as the job's tasks
    eval_dataset: list[Task] = field(default_factory=list)
    stop_sequences: tuple[str, ...] = ()  # verifiers environments end turns themselves


def add_import_path(paths: Sequence[Path]) -> None:
    """Put each existing directory first on sys.path (the run's installed environments)."""
    for p in reversed([str(p) for p in paths if Path(p).is_dir()]):
        if p not in sys.path:
            sys.path.insert(0, p)


def _one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split()) or type(exc).__name__
    return text if len(text) <= 300 else text[:297] + "..."


def _import_verifiers() -> Any:
    try:
        import verifiers
    except ImportError:
        raise EnvLoadError("vf: environments need the verifiers library (pip install 'opsctl[training]')") \
            from None
    return verifiers


def _rows(dataset: Any, env_id: str) -> list[dict[str, Any]]:
    rows = []
    for i, row in enumerate(dataset):
        r = dict(row)
        r.setdefault("example_id", i)
        if "prompt" not in r:
            raise EnvLoadError(f"env {PREFIX}{env_id}: dataset row {i} has no prompt")
        rows.append(r)
    return rows


def _prompt_text(prompt: Any) -> str:
    if isinstance(prompt, str):
        return prompt
    return "\n".join(f"{m.get('role', '?')}: {m.get('content', '')}" for m in prompt if isinstance(m, dict))


def _tasks(rows: list[dict[str, Any]], env_id: str) -> list[Task]:
    return [Task(f"{env_id}:{r['example_id']}", _prompt_text(r["prompt"]), str(r.get("answer", "")))
            for r in rows]


def load(name: str, kwargs: dict[str, Any], paths: Sequence[Path] = ()) -> VerifiersEnvironment:
    """Load `vf:<env_id>` with env.kwargs; `paths` are searched first for its package."""
    env_id = name[len(PREFIX):]
    if not env_id:
        raise EnvLoadError(f"env.name {name!r}: give the environment's id after {PREFIX!r}")
    add_import_path(paths)
    vf = _import_verifiers()
    logging.getLogger("verifiers").setLevel(logging.WARNING)  # reward-function errors are counted
    try:
        vf_env = vf.load_environment(env_id, **kwargs)
    except ValueError as exc:  # verifiers: the module could not be imported
        cause = exc.__cause__
        why = _one_line(cause) if cause is not None else _one_line(exc)
        raise EnvLoadError(f"env {name}: not installed or not importable ({why})") from None
    except Exception as exc:
        if _no_loader(exc) and _v1_module(env_id):
            raise EnvLoadError(f"env {name}: {V1}") from None
        raise EnvLoadError(f"env {name}: {_why_load_failed(exc)}") from None
    _refuse_remote_sandbox(name, vf_env)
    if not isinstance(vf_env, vf.Environment):
        raise EnvLoadError(f"env {name}: {not_an_environment(vf_env)}")
    try:
        rows = _rows(vf_env.get_dataset(), env_id)
        eval_rows = _rows(vf_env.get_eval_dataset(), env_id) if vf_env.eval_dataset is not None else []
    except EnvLoadError:
        raise
    except Exception as exc:
        raise EnvLoadError(f"env {name}: its dataset could not be built: {_one_line(exc)}") from None
    if not rows:
        raise EnvLoadError(f"env {name}: its dataset is empty")
    return VerifiersEnvironment(name, env_id, vf_env, rows, eval_rows, _tasks(rows, env_id),
                                _tasks(eval_rows, env_id))


REMOTE_SANDBOX = ("a verifiers SandboxEnv or PythonEnv, which runs code in Prime's remote sandbox "
                  "service; run model code with training.sandbox in the reward instead")


V1 = ("verifiers.v1 environments are not supported: their harnesses install uv and their programs' "
      "dependencies from a package index at run time (docs/training.md)")


def _is_v1(cls: type) -> bool:
    return any(c.__module__.startswith("verifiers.v1") for c in cls.__mro__)


def not_an_environment(obj: object) -> str:
    what = f"load_environment() returned {type(obj).__name__}, not a verifiers Environment"
    return f"{what}; {V1}" if _is_v1(type(obj)) else what


def _v1_module(env_id: str) -> bool:
    """Whether the environment's module defines a verifiers.v1 Env or Taskset instead of a
    load_environment."""
    module = sys.modules.get(env_id.replace("-", "_").split("/")[-1])
    return module is not None and any(isinstance(v, type) and _is_v1(v) for v in vars(module).values())


def _refuse_remote_sandbox(name: str, vf_env: Any) -> None:
    """verifiers' SandboxEnv (and PythonEnv, built on it) runs code in Prime's hosted sandbox
    service, which an offline cluster cannot reach: every rollout would end in a sandbox error."""
    if any(cls.__name__ == "SandboxEnv" and cls.__module__.startswith("verifiers.")
           for cls in type(vf_env).__mro__):
        raise EnvLoadError(f"env {name}: {type(vf_env).__name__} is {REMOTE_SANDBOX}")


def _raised_in_remote_sandbox(exc: BaseException) -> bool:
    """Whether building the environment failed inside verifiers' SandboxEnv (0.3.1's PythonEnv
    cannot even be built against the prime_sandboxes it installs)."""
    tb = exc.__traceback__
    while tb is not None:
        path = tb.tb_frame.f_code.co_filename
        if "verifiers" in path and path.endswith(("sandbox_env.py", "python_env.py")):
            return True
        tb = tb.tb_next
    return False


def _no_loader(exc: BaseException) -> bool:
    """verifiers' error for a module without load_environment (only then is a v1 class the reason)."""
    cause = exc.__cause__ or exc
    return isinstance(cause, AttributeError) and "load_environment" in str(cause)


def _why_load_failed(exc: BaseException) -> str:
    """verifiers wraps what went wrong in a RuntimeError; say what it was."""
    cause = exc.__cause__ or exc
    if _raised_in_remote_sandbox(cause):
        return f"it is {REMOTE_SANDBOX}"
    if _no_loader(exc):
        return "its module has no load_environment()"
    if isinstance(cause, AttributeError) and cause.name in ("env_id", "env_args"):  # verifiers sets them
        return not_an_environment(cause.obj)
    if isinstance(cause, TypeError):
        return f"env.kwargs do not fit its load_environment(): {_one_line(cause)}"
    return _one_line(cause)


class _ErrorLog(logging.Handler):
    """Collects the reward-function errors verifiers' Rubric logs (it scores 0 instead of raising)."""

    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        msg = record.getMessage()
        if "reward function" in msg:
            self.messages.append(msg)


def capture_reward_errors() -> _ErrorLog:
    """A handler on verifiers' loggers that counts reward functions that raised; remove it with
    `release_reward_errors`."""
    handler = _ErrorLog()
    logging.getLogger("verifiers").addHandler(handler)
    return handler


def release_reward_errors(handler: _ErrorLog) -> None:
    logging.getLogger("verifiers").removeHandler(handler)


def check_scoring(env: VerifiersEnvironment, examples: int) -> None:
    """Score the first `examples` rows with their reference answer as the whole completion (one
    assistant message), as the rubric will score rollouts; a reward function that raises on any of
    them fails the check. verifiers' Rubric would log the error and score 0 for every rollout."""
    rows = env.rows[:examples]
    if not rows:
        return
    handler = capture_reward_errors()
    try:
        asyncio.run(_score_rows(env, rows))
    except Exception as exc:
        raise EnvLoadError(f"env {env.name}: scoring a reference answer failed: {_one_line(exc)}") from None
    finally:
        release_reward_errors(handler)
    if handler.messages:
        raise EnvLoadError(f"env {env.name}: {len(handler.messages)} of {len(rows)} reference answers "
                           f"raised in the rubric; first: {_one_line(Exception(handler.messages[0]))}")


async def _score_rows(env: VerifiersEnvironment, rows: list[dict[str, Any]]) -> None:
    vf = _import_verifiers()
    from verifiers.utils.message_utils import normalize_messages

    # Nothing is sent: the client is only resolved, and no request is made while scoring.
    client = vf.ClientConfig(api_base_url="http://127.0.0.1:9/v1", api_key_var="OPSCTL_VF_CHECK_KEY",
                             max_retries=0)
    states = []
    for row in rows:
        state = await env.vf_env.init_state(row, client, "policy", {})
        answer = [{"role": "assistant", "content": str(row.get("answer", ""))}]
        state["completion"] = normalize_messages(answer, field_name="completion")
        states.append(state)
    await env.vf_env.rubric.score_group(states)
