"""Rollouts of a verifiers environment (`env.name = "vf:..."`), driven by the environment itself.

For each task of a group the environment runs `group_size` rollouts (`run_group`: its own turns,
tool calls and rubric) with verifiers' OpenAI chat client pointed at one of the run's inference
servers, asking for the token ids and log-probs of every turn (`return_token_ids`, as vLLM serves
them). Each rollout's trajectory becomes training samples through training/orchestrator/turns.py.

What the scheduler expects of a request holds here too:
- a cancelled request (its CancelHandle) stops the group's rollouts at once (their HTTP requests
  are closed) and raises RequestCancelled;
- a rollout that failed because the server did not answer (connection refused or reset, timeout,
  502/503/504) fails the whole group's request with a transient ServerError, which failover retries
  on this replica and then the others; other server errors (4xx) end the job with their message;
- any other error inside the environment (a tool that raised, a bad response) keeps the rollout
  with the reward the rubric gave it, out of the loss (`Rollout.error`), and counts in the metrics.
- a reply whose only sampled token ended the turn is not an error (verifiers would call it
  EmptyModelResponseError): it is the policy's choice, rewarded and trained.

No seed is sent: verifiers sends one set of sampling arguments for a whole group, and one seed
would make every rollout of the group the same sample. Every turn is given the policy version that
was loaded when the request was sent: the oldest it can be, so the off-policy bound errs strict.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import re
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from training.envs.verifiers_env import VerifiersEnvironment, capture_reward_errors
from training.inference.client import CancelHandle, RequestCancelled, ServerError
from training.orchestrator.batch import Rollout, RolloutGroup, group_advantages
from training.orchestrator.turns import merge_turns, turns_from_trajectory

log = logging.getLogger("orchestrator")
API_KEY_VAR = "OPSCTL_INFERENCE_API_KEY"  # verifiers reads the key from a variable; ours ignore it
POLL_S = 0.05
_STATUS = re.compile(r"Error code: (\d{3})")
_NO_ANSWER = ("APIConnectionError", "APITimeoutError", "ConnectError", "ReadTimeout", "RemoteProtocolError")


@dataclass
class VfOutput:
    """One finished rollout as the environment returned it."""

    reward: float
    metrics: dict[str, float]
    trajectory: list[dict[str, Any]]
    truncated: bool
    error: str | None  # the error's chain, e.g. "ToolCallError -> ValueError"
    turns: int


def sampling_args(max_tokens: int, temperature: float) -> dict[str, Any]:
    return {"max_tokens": max_tokens, "temperature": temperature, "logprobs": True,
            "extra_body": {"return_token_ids": True}}


def server_failure(error: dict[str, Any] | None) -> ServerError | None:
    """The ServerError for a rollout that failed because the inference server did not answer or
    refused the request; None for any other outcome."""
    if not error:
        return None
    chain = str(error.get("error_chain_str", ""))
    text = f"{error.get('message', '')} {error.get('error_chain_repr', '')}"
    if any(name in chain for name in _NO_ANSWER):
        return ServerError(f"inference server did not answer: {error.get('message', chain)}")
    m = _STATUS.search(text)
    if m and ("StatusError" in chain or "ServerError" in chain or "RequestError" in chain
              or "NotFoundError" in chain or "UnprocessableEntityError" in chain):
        return ServerError(f"inference server answered {m.group(1)}: {error.get('message', '')}",
                           int(m.group(1)))
    return None


def _output(raw: dict[str, Any]) -> VfOutput:
    err = raw.get("error")
    return VfOutput(
        reward=float(raw.get("reward") or 0.0),
        metrics={k: float(v) for k, v in (raw.get("metrics") or {}).items()},
        trajectory=list(raw.get("trajectory") or []),
        truncated=bool(raw.get("is_truncated")),
        error=str(err.get("error_chain_str") or err.get("error")) if err else None,
        turns=len(raw.get("trajectory") or []),
    )


class VerifiersRollouts:
    """Runs a verifiers environment's groups against one inference server at a time."""

    def __init__(self, env: VerifiersEnvironment, model: str, group_size: int, max_tokens: int,
                 temperature: float, request_timeout_s: float) -> None:
        self.env, self.model, self.group_size = env, model, group_size
        self.max_tokens, self.temperature, self.timeout = max_tokens, temperature, request_timeout_s
        # One handler for every request thread: a handler per request would also count the errors
        # of the requests running beside it.
        self._reward_log = capture_reward_errors()
        # Each request thread keeps one event loop and one client per server: building verifiers'
        # client (an httpx pool with its TLS context) and a loop with its executor for every request
        # cost more CPU than the rollouts of a small model.
        self._local = threading.local()

    @property
    def reward_errors(self) -> int:
        """Reward functions that raised so far (verifiers logs them and scores 0)."""
        return len(self._reward_log.messages)

    def run(self, base_url: str, indices: Sequence[int], cancel: CancelHandle | None = None,
            rows: Sequence[dict[str, Any]] | None = None, n: int | None = None,
            temperature: float | None = None) -> list[list[VfOutput]]:
        """`n` (group_size) rollouts of each row, in row order; raises ServerError when the server did
        not answer and RequestCancelled when `cancel` fired."""
        data = rows if rows is not None else self.env.rows
        args = sampling_args(self.max_tokens, self.temperature if temperature is None else temperature)
        raws = self._loop().run_until_complete(
            self._groups(base_url, [data[i] for i in indices], n or self.group_size, args, cancel))
        for group in raws:
            for raw in group:
                failure = server_failure(raw.get("error"))
                if failure is not None:
                    raise failure
        outputs = [[_output(r) for r in group] for group in raws]
        errors = [o.error for group in outputs for o in group if o.error]
        if errors:  # e.g. EmptyModelResponseError: the model's first token ended its turn
            log.warning("%d of %d rollouts ended in an environment error (first: %s); they are not trained",
                        len(errors), sum(len(g) for g in outputs), errors[0])
        return outputs

    def _loop(self) -> asyncio.AbstractEventLoop:
        loop: asyncio.AbstractEventLoop | None = getattr(self._local, "loop", None)
        if loop is None:
            loop = self._local.loop = asyncio.new_event_loop()
            self._local.clients = {}
        return loop

    def _client(self, base_url: str) -> Any:
        """This thread's client for `base_url` (made on the thread's loop, which its pool binds to)."""
        clients: dict[str, Any] = self._local.clients
        if base_url not in clients:
            import verifiers as vf

            config = vf.ClientConfig(api_base_url=base_url.rstrip("/") + "/v1", api_key_var=API_KEY_VAR,
                                     max_retries=0, timeout=self.timeout)
            clients[base_url] = _training_client(vf)(config)
        return clients[base_url]

    async def _groups(self, base_url: str, rows: list[dict[str, Any]], n: int, args: dict[str, Any],
                      cancel: CancelHandle | None) -> list[list[dict[str, Any]]]:
        client = self._client(base_url)
        work = asyncio.gather(*(
            self.env.vf_env.run_group([dict(row) for _ in range(n)], client, self.model, args,
                                      state_columns=["trajectory"])
            for row in rows
        ))
        while True:
            done, _ = await asyncio.wait({work}, timeout=POLL_S)
            if done:
                return [list(g) for g in work.result()]
            if cancel is not None and cancel.cancelled:
                work.cancel()
                await asyncio.gather(work, return_exceptions=True)
                raise RequestCancelled("group cancelled")


def _sampled_tokens(response: Any) -> bool:
    choices = getattr(response, "choices", None) or []
    return len(choices) == 1 and bool(getattr(choices[0], "token_ids", None))


@functools.cache  # one class for every thread's clients
def _training_client(vf: Any) -> type:
    """verifiers' chat client, except that a reply whose sampled tokens are only the end of the turn
    is a reply: verifiers ends that rollout in EmptyModelResponseError, untrained, so nothing would
    ever push the end token down and a policy drifting towards it would collapse unchecked. Here it
    is an empty assistant message, rewarded by the rubric and trained like any other sample."""

    class TrainingClient(vf.OpenAIChatCompletionsClient):
        async def raise_from_native_response(self, response: Any) -> None:
            try:
                await super().raise_from_native_response(response)
            except vf.EmptyModelResponseError:
                if not _sampled_tokens(response):
                    raise

    return TrainingClient


def to_group(task_id: str, index: int, outputs: list[VfOutput], version: int, normalize_std: bool
             ) -> RolloutGroup:
    """A scored group: every rollout with its turns (at `version`) and its reward's advantage."""
    rollouts = []
    for out in outputs:
        turns = turns_from_trajectory(out.trajectory, version) if out.trajectory else []
        first = merge_turns(turns[:1])
        prompt = turns[0].prompt_ids if turns else []
        completion = first[0].input_ids[len(prompt):] if first else []
        logprobs = first[0].logprobs[len(prompt):] if first else []
        rollouts.append(Rollout(prompt, completion, logprobs, out.reward, version, truncated=out.truncated,
                                parts=dict(out.metrics), turns=turns, error=out.error))
    for r, a in zip(rollouts, group_advantages([r.reward for r in rollouts], normalize_std), strict=True):
        r.advantage = a
    return RolloutGroup(task_id, index, rollouts)


def env_metrics(name: str, groups: list[RolloutGroup], reward_fn_errors: int) -> dict[str, float]:
    """A step's per-environment record: turns per rollout, sampled tokens per rollout (every turn),
    the fraction cut at max_tokens, training samples per rollout (1 when every rollout's turns
    merged), rollouts an environment error ended, reward functions that raised so far, and the
    mean of each rubric function (tool-call counts, for a ToolEnv)."""
    rollouts = [r for g in groups for r in g.rollouts]
    turns = [len(r.turns or []) for r in rollouts]
    samples = [len(merge_turns(r.turns)) for r in rollouts if r.turns]
    sampled = [sum(len(t.completion_ids) for t in r.turns or []) for r in rollouts]
    out = {
        f"turns_mean_{name}": sum(turns) / len(turns),
        f"turns_max_{name}": float(max(turns)),
        f"sampled_tokens_mean_{name}": sum(sampled) / len(sampled),
        f"truncated_fraction_{name}": sum(r.truncated for r in rollouts) / len(rollouts),
        f"samples_per_rollout_{name}": sum(samples) / len(samples) if samples else 0.0,
        f"env_errors_{name}": float(sum(r.error is not None for r in rollouts)),
        f"reward_fn_errors_total_{name}": float(reward_fn_errors),
    }
    for key in sorted({k for r in rollouts for k in r.parts}):
        out[f"{key}_mean_{name}"] = sum(r.parts.get(key, 0.0) for r in rollouts) / len(rollouts)
    return out

