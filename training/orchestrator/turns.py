"""Multi-turn rollouts as training samples: exact token bookkeeping across turns.

A multi-turn rollout (tool calls, environment replies) is a list of turns, each one request to an
inference server: the prompt's token ids as the server rendered them, the sampled completion's
ids and log-probs, and the policy version that sampled it. Only sampled tokens are trained;
everything the environment added between turns (tool output, the next user message, the chat
template's role markers) is context: loss mask 0, log-prob 0.

Turns merge into one sample when the next turn's prompt starts with exactly the previous prompt
followed by the previous completion (the template re-rendered the conversation to the same
tokens); otherwise a new sample starts with the next turn's own prompt, because training on a
context the model never saw would make the importance ratio meaningless. Each token keeps the
version of the turn that sampled it, so the off-policy bound applies per turn: a turn older than
the bound stays as context but is not trained.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any


@dataclass
class Turn:
    prompt_ids: list[int]
    completion_ids: list[int]
    completion_logprobs: list[float]
    version: int  # policy version that sampled the completion

    def __post_init__(self) -> None:
        if len(self.completion_ids) != len(self.completion_logprobs):
            raise ValueError(f"a turn has {len(self.completion_ids)} completion tokens but "
                             f"{len(self.completion_logprobs)} log-probs")


@dataclass
class TurnSample:
    input_ids: list[int] = field(default_factory=list)
    loss_mask: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    versions: list[int] = field(default_factory=list)  # per token: the sampling turn's, -1 for context
    turns: int = 0

    def extend_context(self, ids: list[int]) -> None:
        self.input_ids += ids
        self.loss_mask += [0] * len(ids)
        self.logprobs += [0.0] * len(ids)
        self.versions += [-1] * len(ids)

    def extend_sampled(self, turn: Turn, trained: bool) -> None:
        self.input_ids += turn.completion_ids
        self.loss_mask += [int(trained)] * len(turn.completion_ids)
        self.logprobs += list(turn.completion_logprobs)
        self.versions += [turn.version] * len(turn.completion_ids)
        self.turns += 1


def merge_turns(turns: list[Turn], step: int | None = None, max_off_policy_steps: int | None = None
                ) -> list[TurnSample]:
    """Samples of one rollout, in order. With `step` and `max_off_policy_steps`, the completion of a
    turn more than that many versions behind `step` is kept as context only (mask 0)."""
    out: list[TurnSample] = []
    for turn in turns:
        trained = step is None or max_off_policy_steps is None or step - turn.version <= max_off_policy_steps
        cur = out[-1] if out else None
        if cur is not None and turn.prompt_ids[: len(cur.input_ids)] == cur.input_ids:
            cur.extend_context(turn.prompt_ids[len(cur.input_ids):])  # the environment's tokens
        else:
            cur = TurnSample()
            cur.extend_context(turn.prompt_ids)
            out.append(cur)
        cur.extend_sampled(turn, trained)
    return out


def turns_from_trajectory(steps: Sequence[Mapping[str, Any]], version: int) -> list[Turn]:
    """The turns of a verifiers rollout (its state's `trajectory`: one step per model response, each
    with the `tokens` the client read from the server's `prompt_token_ids`, `token_ids` and
    log-probs). A step without tokens means the server did not return them (no `return_token_ids`):
    training on re-tokenized text would not be the sampled tokens, so that is an error."""
    turns = []
    for i, step in enumerate(steps):
        tokens = step.get("tokens")
        if not tokens:
            raise ValueError(f"trajectory step {i} has no token ids (request them with return_token_ids)")
        turns.append(Turn(list(tokens["prompt_ids"]), list(tokens["completion_ids"]),
                          [float(x) for x in tokens["completion_logprobs"]], version))
    return turns
