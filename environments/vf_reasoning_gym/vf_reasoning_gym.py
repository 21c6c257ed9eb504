"""reasoning-gym's procedural tasks through verifiers' ReasoningGymEnv: every problem is generated
from a seed by reasoning-gym itself, so nothing is downloaded and the environment runs on a node
without network. The answer goes in <answer>...</answer>; reasoning-gym's own scorer gives the
reward.

Select with `env.name = "vf:vf-reasoning-gym"`; `env.kwargs`: `gym` (a reasoning-gym dataset
name), `config` (that dataset's settings, e.g. {min_terms = 2, max_terms = 2}), sizes and seed.
"""

from __future__ import annotations

from typing import Any

import verifiers as vf


def load_environment(gym: str = "basic_arithmetic", config: dict[str, Any] | None = None,
                     num_train: int = 200, num_eval: int = 20, seed: int = 0) -> vf.Environment:
    from verifiers.envs.integrations.reasoninggym_env import ReasoningGymEnv

    spec: str | list[str | dict[str, Any]] = gym
    if config:
        spec = [{"name": gym, "weight": 1.0, "config": config}]
    return ReasoningGymEnv(gym=spec, num_train_examples=num_train, num_eval_examples=num_eval, seed=seed)
