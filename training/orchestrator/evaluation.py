"""Held-out evaluation ([eval]): which environments, how they are scored, what is recorded.

The orchestrator asks for completions (`generate`) on the inference servers, as for rollouts; the
servers report the policy version of every token, so each result names the version it measured
(with the built-in server, a reload during an eval shows as a range).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from training.config import EvalConfig, JobConfig
from training.envs import Environment, VerifiersEnvironment, load_environment
from training.inference.client import Completion
from training.orchestrator.vf_rollouts import VfOutput

# indices, samples per index, temperature, seed, dataset -> (index, completions) per index
Generate = Callable[[list[int], int, float, int, Any], list[tuple[int, list[Completion]]]]
# held-out rows, rollouts per row, temperature -> a verifiers environment's rollouts per row
VfRollouts = Callable[[list[dict[str, Any]], int, float], list[list[VfOutput]]]
# A verifiers rollout counts as correct (accuracy, pass@k) at this reward or more.
VF_CORRECT_REWARD = 1.0

AnyEnv = Environment | VerifiersEnvironment


def eval_environments(cfg: JobConfig, train_env: AnyEnv) -> list[AnyEnv]:
    """The environments [eval] names, each loaded once; empty names the training environment."""
    names = cfg.eval.envs or [train_env.name]
    out: list[AnyEnv] = []
    for name in names:
        try:
            out.append(train_env if name == train_env.name else load_environment(name))
        except ValueError as exc:
            raise ValueError(f"eval.envs: {exc}") from None
    return out


def pass_at_k(n: int, correct: int, k: int) -> float:
    """The unbiased estimate of pass@k from n samples of which `correct` are right: the chance that
    k drawn without replacement include a right one, 1 - C(n-c, k) / C(n, k)."""
    if n - correct < k:
        return 1.0
    return 1.0 - math.comb(n - correct, k) / math.comb(n, k)


@dataclass
class EvalResult:
    env: str
    step: int  # the trainer step the evaluation is tagged with (the policy after `step` updates)
    accuracy: float
    size: int
    samples: int
    temperature: float
    policy_version: int  # the oldest version any evaluated token came from
    policy_version_max: int
    pass_at: dict[int, float] = field(default_factory=dict)
    reward_mean: float | None = None  # verifiers environments: the mean reward of every rollout
    errors: int = 0  # verifiers environments: rollouts an environment error ended (scored as wrong)

    def record(self) -> dict[str, Any]:
        """The metrics.jsonl line (`event: eval`)."""
        return {
            "event": "eval",
            "step": self.step,
            "env": self.env,
            "policy_version": self.policy_version,
            "policy_version_max": self.policy_version_max,
            "eval_accuracy": self.accuracy,
            "eval_size": self.size,
            "eval_samples": self.samples,
            "eval_temperature": self.temperature,
            **{f"eval_pass_at_{k}": v for k, v in sorted(self.pass_at.items())},
            **({} if self.reward_mean is None else {"eval_reward_mean": self.reward_mean,
                                                    "eval_errors": self.errors}),
        }


def evaluate_env(
    env: Environment, ec: EvalConfig, generate: Generate, decode: Callable[[list[int]], str],
    step: int, seed: int, loaded_version: int,
) -> EvalResult | None:
    """Score the first `ec.size` held-out problems of `env`, `ec.samples` completions each; None
    when the environment has no held-out problems."""
    data = env.eval_dataset[: ec.size]
    if not data:
        return None
    n = ec.samples
    results = generate(list(range(len(data))), n, ec.temperature, seed, data)
    per_problem: list[int] = []
    versions: list[int] = []
    for i, comps in results:
        answer = data[i].answer
        per_problem.append(sum(int(env.parser.parse_answer(decode(c.tokens)) == answer) for c in comps))
        versions.extend(v for c in comps if c.versions for v in c.versions)  # (oldest, newest)
    return EvalResult(
        env=env.name,
        step=step,
        accuracy=sum(per_problem) / (len(data) * n),
        size=len(data),
        samples=n,
        temperature=ec.temperature,
        # vLLM reports no versions: the one loaded when the eval began
        policy_version=min(versions, default=loaded_version),
        policy_version_max=max(versions, default=loaded_version),
        pass_at={k: _mean([pass_at_k(n, c, k) for c in per_problem]) for k in ec.pass_k},
    )


def evaluate_vf(env: VerifiersEnvironment, ec: EvalConfig, rollouts: VfRollouts, step: int,
                loaded_version: int) -> EvalResult | None:
    """A verifiers environment on its first `ec.size` held-out rows, `ec.samples` rollouts each: a
    rollout is correct when its reward is at least VF_CORRECT_REWARD; the mean reward is recorded
    too (partial credit). The policy version is the one loaded when the evaluation began."""
    rows = env.eval_rows[: ec.size]
    if not rows:
        return None
    n = ec.samples
    results = rollouts(rows, n, ec.temperature)
    per_problem = [sum(int(o.reward >= VF_CORRECT_REWARD) for o in outs) for outs in results]
    return EvalResult(
        env=env.name, step=step, accuracy=sum(per_problem) / (len(rows) * n), size=len(rows), samples=n,
        temperature=ec.temperature, policy_version=loaded_version, policy_version_max=loaded_version,
        pass_at={k: _mean([pass_at_k(n, c, k) for c in per_problem]) for k in ec.pass_k},
        reward_mean=_mean([o.reward for outs in results for o in outs]),
        errors=sum(o.error is not None for outs in results for o in outs),
    )


def _mean(values: Sequence[float]) -> float:
    return sum(values) / len(values)
