"""A small torch inference engine with continuous batching and in-place weight updates.

Sequences join the running batch between decode steps and leave as soon as they finish, so a
long request never holds back a short one. `pause()` returns once the current decode step is done;
weights can then be swapped and `resume()` carries on with every in-flight sequence intact (its
tokens keep the policy version they were sampled with). Each step recomputes the full prefix
(no KV cache): right for the tiny CPU models of tests and the demo; GPU deployments use vLLM.
"""

from __future__ import annotations

import itertools
import threading
import time
from dataclasses import dataclass, field
from typing import Any

import torch


@dataclass
class Sequence:
    prompt: list[int]
    max_tokens: int
    temperature: float
    generator: torch.Generator
    tokens: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    versions: list[int] = field(default_factory=list)
    finish_reason: str | None = None


@dataclass
class Request:
    id: int
    seqs: list[Sequence]
    done: threading.Event = field(default_factory=threading.Event)
    pending: int = 0

    def wait(self, timeout: float | None = None) -> list[Sequence]:
        if not self.done.wait(timeout):
            raise TimeoutError(f"request {self.id} not finished")
        return self.seqs


class Engine:
    def __init__(
        self,
        model: Any,
        pad_id: int,
        stop_ids: set[int],
        max_batch_size: int = 64,
        version: int = 0,
        device: str = "cpu",
    ) -> None:
        self.model = model.eval()
        self.pad_id = pad_id
        self.stop_ids = set(stop_ids)
        self.max_batch_size = max_batch_size
        self.version = version
        self.device = device
        self._cv = threading.Condition()
        self._waiting: list[tuple[Request, Sequence]] = []
        self._active: list[tuple[Request, Sequence]] = []
        self._paused = False
        self._busy = False
        self._stop = False
        self._ids = itertools.count()
        self.tokens_generated = 0
        self.steps = 0
        self.updates = 0
        self._thread = threading.Thread(target=self._loop, name="engine", daemon=True)
        self._thread.start()

    # -- requests -------------------------------------------------------------------------------
    def submit(
        self,
        prompts: list[list[int]],
        n: int = 1,
        max_tokens: int = 16,
        temperature: float = 1.0,
        seed: int | None = None,
    ) -> Request:
        if not prompts or any(not p for p in prompts):
            raise ValueError("empty prompt")
        req = Request(id=next(self._ids), seqs=[])
        base = seed if seed is not None else int(torch.randint(0, 2**31, (1,)).item())
        for i, p in enumerate(prompts):
            for j in range(n):
                g = torch.Generator()
                # Each sequence draws from its own generator: the same seed gives the same sample
                # whatever else shares the batch.
                g.manual_seed((base * 1_000_003 + i * 1009 + j) % 2**63)
                req.seqs.append(Sequence(list(p), max_tokens, temperature, g))
        req.pending = len(req.seqs)
        with self._cv:
            if self._stop:
                raise RuntimeError("engine stopped")
            self._waiting.extend((req, s) for s in req.seqs)
            self._cv.notify_all()
        return req

    # -- control --------------------------------------------------------------------------------
    def pause(self) -> None:
        with self._cv:
            self._paused = True
            while self._busy:
                self._cv.wait()

    def resume(self) -> None:
        with self._cv:
            self._paused = False
            self._cv.notify_all()

    @property
    def paused(self) -> bool:
        return self._paused

    def in_flight(self) -> int:
        with self._cv:
            return len(self._active) + len(self._waiting)

    def update_weights(self, state_dict: dict[str, torch.Tensor], version: int) -> float:
        """Swap weights between decode steps; returns the seconds generation was paused."""
        t0 = time.perf_counter()
        was_paused = self._paused
        self.pause()
        try:
            missing, unexpected = self.model.load_state_dict(state_dict, strict=False)
            if unexpected or [m for m in missing if not m.endswith("rotary_emb.inv_freq")]:
                raise ValueError(f"weights do not match the model: missing={missing} unexpected={unexpected}")
            self.version = version
            self.updates += 1
        finally:
            if not was_paused:
                self.resume()
        return time.perf_counter() - t0

    def stop(self) -> None:
        with self._cv:
            self._stop = True
            self._cv.notify_all()
        self._thread.join(timeout=10)

    # -- the loop -------------------------------------------------------------------------------
    def _loop(self) -> None:
        while True:
            with self._cv:
                while not self._stop and (self._paused or not (self._active or self._waiting)):
                    self._cv.wait()
                if self._stop:
                    return
                room = self.max_batch_size - len(self._active)
                if room > 0 and self._waiting:
                    self._active.extend(self._waiting[:room])
                    del self._waiting[:room]
                self._busy = True
                batch = list(self._active)
            try:
                self._step(batch)
            finally:
                with self._cv:
                    self._busy = False
                    finished = [(r, s) for r, s in batch if s.finish_reason is not None]
                    self._active = [(r, s) for r, s in self._active if s.finish_reason is None]
                    self._cv.notify_all()
                for req, _seq in finished:
                    req.pending -= 1
                    if req.pending == 0:
                        req.done.set()

    @torch.no_grad()
    def _step(self, batch: list[tuple[Request, Sequence]]) -> None:
        rows = [s.prompt + s.tokens for _, s in batch]
        width = max(len(r) for r in rows)
        ids = torch.full((len(rows), width), self.pad_id, dtype=torch.long)
        attn = torch.zeros((len(rows), width), dtype=torch.long)
        for i, r in enumerate(rows):  # left padding: the next-token logits sit in the last column
            ids[i, width - len(r) :] = torch.tensor(r)
            attn[i, width - len(r) :] = 1
        pos = (attn.cumsum(-1) - 1).clamp(min=0)
        logits = (
            self.model(
                input_ids=ids.to(self.device),
                attention_mask=attn.to(self.device),
                position_ids=pos.to(self.device),
            )
            .logits[:, -1]
            .float()
            .cpu()
        )
        for i, (_, s) in enumerate(batch):
            if s.temperature > 0:
                lp = torch.log_softmax(logits[i] / s.temperature, dim=-1)
                tok = int(torch.multinomial(lp.exp(), 1, generator=s.generator).item())
            else:
                lp = torch.log_softmax(logits[i], dim=-1)
                tok = int(lp.argmax().item())
            s.tokens.append(tok)
            s.logprobs.append(float(lp[tok]))
            s.versions.append(self.version)
            if tok in self.stop_ids:
                s.finish_reason = "stop"
            elif len(s.tokens) >= s.max_tokens:
                s.finish_reason = "length"
        self.tokens_generated += len(batch)
        self.steps += 1
