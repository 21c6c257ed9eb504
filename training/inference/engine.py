"""A small torch inference engine with continuous batching, a KV cache and in-place weight updates.

Sequences join the running batch between decode steps and leave as soon as they finish, so a
long request never holds back a short one. `pause()` returns once the current decode step is done;
weights can then be swapped and `resume()` carries on with every in-flight sequence intact (its
tokens keep the policy version they were sampled with). `cancel(request)` drops a request's
sequences at the next step (finish_reason "abort", as vLLM reports an aborted request): the server
calls it when the client hangs up, so an abandoned request stops costing decode steps.

With `kv_cache` (the default) the running batch keeps one left-padded key/value cache: a joining
sequence is prefilled on its own and its cache merged in, a leaving one is dropped from it, and each
decode step feeds one token per sequence. A weight update drops the cache, so the next step
re-prefills every in-flight sequence with the new weights: tokens and logprobs are the same as
when every step recomputes the full prefix (`kv_cache=False`, kept for comparison and the bench).
Right for the tiny CPU models of tests and the demo; GPU deployments use vLLM.
"""

from __future__ import annotations

import inspect
import itertools
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn.functional as F
from transformers import DynamicCache
from transformers.cache_utils import DynamicLayer


@dataclass
class Sequence:
    prompt: list[int]
    max_tokens: int
    temperature: float
    generator: torch.Generator
    tokens: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    versions: list[int] = field(default_factory=list)
    finish_reason: str | None = None  # "stop", "length", or "abort" when its request was cancelled
    stop: tuple[str, ...] = ()  # strings that end the sequence once its text contains one
    stop_reason: str | None = None  # the stop string that ended it, if any


@dataclass
class Request:
    id: int
    seqs: list[Sequence]
    done: threading.Event = field(default_factory=threading.Event)
    pending: int = 0
    cancelled: bool = False  # set by Engine.cancel; the loop drops the sequences at its next step

    def wait(self, timeout: float | None = None) -> list[Sequence]:
        if not self.done.wait(timeout):
            raise TimeoutError(f"request {self.id} not finished")
        return self.seqs


Layers = list[tuple[torch.Tensor, torch.Tensor]]  # per layer: keys, values [B, heads, T, head_dim]


def _layers(cache: DynamicCache) -> Layers:
    """The cached tensors, or [] while nothing is cached (layers are created lazily)."""
    if not cache.layers or getattr(cache.layers[0], "keys", None) is None:
        return []
    out: Layers = []
    for layer in cache.layers:
        # Engine() refuses models whose cache is anything else (see full_attention_only).
        assert type(layer) is DynamicLayer and layer.keys is not None and layer.values is not None
        out.append((layer.keys, layer.values))
    return out


class CacheUnsupported(ValueError):
    """The model's cache cannot be kept per batch row (kv_cache=True is refused at start-up)."""


def full_attention_only(config: Any) -> bool:
    """Whether every layer is full attention, whose cache is plain keys/values per row that can be
    padded, merged and dropped. Sliding-window and linear-attention layers keep state that cannot."""
    types = getattr(config, "layer_types", None)
    if types:
        return all(t == "full_attention" for t in types)
    return not getattr(config, "use_sliding_window", False)


@dataclass
class KVBatch:
    """The running batch's cache. Row i caches every token of rows[i] but the last (that one is fed
    at the next decode step), right-aligned: `mask` is 0 over the left padding."""

    rows: list[Sequence]
    layers: Layers
    mask: torch.Tensor  # [B, T], long
    # The transformers cache holding `layers`, reused by the next decode step as long as the rows
    # stay the same (rebuilding it copies every layer).
    cache: DynamicCache | None = None

    @property
    def width(self) -> int:
        return int(self.mask.shape[1])

    def select(self, keep: list[int]) -> KVBatch | None:
        """Only the rows `keep`, without the leading columns that are padding in all of them."""
        if not keep:
            return None
        if keep == list(range(len(self.rows))) and bool(self.mask[:, :1].any()):
            return self  # unchanged: the next step reuses the cache object
        idx = torch.tensor(keep, dtype=torch.long)
        mask = self.mask[idx]
        real = mask.any(0).nonzero()
        first = int(real[0]) if len(real) else mask.shape[1]
        layers = [(k[idx.to(k.device), :, first:], v[idx.to(v.device), :, first:]) for k, v in self.layers]
        return KVBatch([self.rows[i] for i in keep], layers, mask[:, first:])

    def merge(self, other: KVBatch) -> KVBatch:
        """Both batches' rows, the narrower one padded on the left."""
        width = max(self.width, other.width)
        ref = self.layers or other.layers

        def padded(b: KVBatch) -> Layers:
            out = []
            for i, (rk, rv) in enumerate(ref):
                if b.layers:
                    k, v = b.layers[i]
                else:  # nothing cached yet (one-token prefixes): zero columns of the right shape
                    k = rk.new_zeros(len(b.rows), rk.shape[1], 0, rk.shape[3])
                    v = rv.new_zeros(len(b.rows), rv.shape[1], 0, rv.shape[3])
                pad = (0, 0, width - k.shape[2], 0)
                out.append((F.pad(k, pad), F.pad(v, pad)))
            return out

        a, b = padded(self), padded(other)
        layers = [(torch.cat([ka, kb]), torch.cat([va, vb])) for (ka, va), (kb, vb) in zip(a, b, strict=True)]
        mask = torch.cat([F.pad(x.mask, (width - x.width, 0)) for x in (self, other)])
        return KVBatch(self.rows + other.rows, layers, mask)


class Engine:
    def __init__(
        self,
        model: Any,
        pad_id: int,
        stop_ids: set[int],
        max_batch_size: int = 64,
        version: int = 0,
        device: str = "cpu",
        kv_cache: bool = True,
        detokenize: Callable[[list[int]], str] | None = None,
    ) -> None:
        if kv_cache and not full_attention_only(model.config):
            raise CacheUnsupported(
                "inference.kv_cache: the model has sliding-window or linear-attention layers, whose "
                "cache cannot be merged across a running batch; set inference.kv_cache=false"
            )
        self.model = model.eval()
        self.pad_id = pad_id if pad_id is not None else 0  # any id works under the attention mask
        self.stop_ids = {int(t) for t in stop_ids if t is not None}
        self.max_batch_size = max_batch_size
        self.version = version
        self.device = device
        self.kv_cache = kv_cache
        # Token ids to text, for stop strings; the server sets it from its tokenizer.
        self.detokenize = detokenize
        self._kv: KVBatch | None = None  # only the loop thread touches it, or a paused engine
        # transformers renamed the cache argument (past_key_values -> cache) in 5.x.
        params = inspect.signature(self.model.forward).parameters
        self._cache_kwarg = "cache" if "cache" in params else "past_key_values"
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
        stop: Iterable[str] = (),
    ) -> Request:
        if not prompts or any(not p for p in prompts):
            raise ValueError("empty prompt")
        stops = tuple(stop)
        if any(not x for x in stops):
            raise ValueError("stop strings must be non-empty")
        if stops and self.detokenize is None:
            raise ValueError("stop strings need an engine with a detokenizer")
        req = Request(id=next(self._ids), seqs=[])
        base = seed if seed is not None else int(torch.randint(0, 2**31, (1,)).item())
        for i, p in enumerate(prompts):
            for j in range(n):
                g = torch.Generator()
                # Each sequence draws from its own generator: the same seed gives the same sample
                # whatever else shares the batch.
                g.manual_seed((base * 1_000_003 + i * 1009 + j) % 2**63)
                req.seqs.append(Sequence(list(p), max_tokens, temperature, g, stop=stops))
        req.pending = len(req.seqs)
        with self._cv:
            if self._stop:
                raise RuntimeError("engine stopped")
            self._waiting.extend((req, s) for s in req.seqs)
            self._cv.notify_all()
        return req

    def cancel(self, req: Request) -> None:
        """Stop generating for `req`: its unfinished sequences leave the batch (and the KV cache)
        before the next decode step and end with finish_reason "abort"; `req.done` is then set.
        A no-op for a finished request."""
        with self._cv:
            req.cancelled = True
            self._cv.notify_all()

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
            # The cached keys/values came from the old weights: re-prefill in-flight sequences.
            self._kv = None
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
                aborted = self._drop_cancelled()
                room = self.max_batch_size - len(self._active)
                if room > 0 and self._waiting:
                    self._active.extend(self._waiting[:room])
                    del self._waiting[:room]
                self._busy = True
                batch = list(self._active)
            # Set after _busy: pause() returning after a cancelled request is done means the next
            # step, without its rows, has run.
            self._finish(aborted)
            try:
                if batch:
                    self._step(batch)
                else:
                    self._kv = None  # every sequence was cancelled: nothing left to cache
            finally:
                with self._cv:
                    self._busy = False
                    finished = [(r, s) for r, s in batch if s.finish_reason is not None]
                    self._active = [(r, s) for r, s in self._active if s.finish_reason is None]
                    self._cv.notify_all()
                self._finish(finished)

    def _drop_cancelled(self) -> list[tuple[Request, Sequence]]:
        """Take the sequences of cancelled requests out of the queue and the batch (cv held, loop
        thread: no step is running, so finish_reason is not being written)."""
        gone = [(r, s) for r, s in self._active + self._waiting if r.cancelled]
        if gone:
            self._active = [(r, s) for r, s in self._active if not r.cancelled]
            self._waiting = [(r, s) for r, s in self._waiting if not r.cancelled]
            for _, s in gone:
                s.finish_reason = "abort"
        return gone

    @staticmethod
    def _finish(seqs: list[tuple[Request, Sequence]]) -> None:
        """Count finished sequences off their requests (loop thread only)."""
        for req, _seq in seqs:
            req.pending -= 1
            if req.pending == 0:
                req.done.set()

    @torch.no_grad()
    def _step(self, batch: list[tuple[Request, Sequence]]) -> None:
        seqs = [s for _, s in batch]
        logits = self._logits_cached(seqs) if self.kv_cache else self._logits_full(seqs)
        for i, s in enumerate(seqs):
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
            elif s.stop and (hit := self._stop_string(s)) is not None:
                s.finish_reason, s.stop_reason = "stop", hit
            elif len(s.tokens) >= s.max_tokens:
                s.finish_reason = "length"
        self.tokens_generated += len(batch)
        self.steps += 1

    def _stop_string(self, s: Sequence) -> str | None:
        """The stop string the newest token completed, if any. Only the tail is decoded: an earlier
        match would have ended the sequence at an earlier step."""
        assert self.detokenize is not None  # submit() refuses stop strings without one
        tail = self.detokenize(s.tokens[-(max(len(x) for x in s.stop) + 4) :])
        hits = [x for x in s.stop if x in tail]
        return min(hits, key=tail.index) if hits else None

    def _forward(self, ids: torch.Tensor, attn: torch.Tensor, pos: torch.Tensor, cache: Any) -> Any:
        return self.model(
            input_ids=ids.to(self.device),
            attention_mask=attn.to(self.device),
            position_ids=pos.to(self.device),
            use_cache=cache is not None,
            logits_to_keep=1,
            **{self._cache_kwarg: cache},
        )

    def _left_padded(self, rows: list[list[int]]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        width = max(len(r) for r in rows)
        ids = torch.full((len(rows), width), self.pad_id, dtype=torch.long)
        attn = torch.zeros((len(rows), width), dtype=torch.long)
        for i, r in enumerate(rows):  # left padding: the next-token logits sit in the last column
            if r:
                ids[i, width - len(r) :] = torch.tensor(r)
                attn[i, width - len(r) :] = 1
        return ids, attn, (attn.cumsum(-1) - 1).clamp(min=0)

    def _logits_full(self, seqs: list[Sequence]) -> torch.Tensor:
        """Next-token logits recomputing every sequence's whole prefix."""
        ids, attn, pos = self._left_padded([s.prompt + s.tokens for s in seqs])
        return self._forward(ids, attn, pos, None).logits[:, -1].float().cpu()

    def _prefill(self, seqs: list[Sequence]) -> KVBatch:
        """A cache for sequences joining the batch: all their tokens but the last."""
        prefixes = [(s.prompt + s.tokens)[:-1] for s in seqs]
        if max(len(p) for p in prefixes) == 0:  # BOS-only prompts: nothing to cache yet
            return KVBatch(list(seqs), [], torch.zeros((len(seqs), 0), dtype=torch.long))
        cache = DynamicCache()
        ids, attn, pos = self._left_padded(prefixes)
        self._forward(ids, attn, pos, cache)
        return KVBatch(list(seqs), _layers(cache), attn)

    def _logits_cached(self, seqs: list[Sequence]) -> torch.Tensor:
        """Next-token logits from the cache plus one token per sequence; keeps the cache in step
        with the batch: finished sequences leave it, new ones are prefilled into it."""
        kv, present = self._kv, {id(s) for s in seqs}
        if kv is not None:
            kv = kv.select([i for i, r in enumerate(kv.rows) if id(r) in present])
        cached = {id(r) for r in kv.rows} if kv is not None else set()
        new = [s for s in seqs if id(s) not in cached]
        if new:
            fresh = self._prefill(new)
            kv = fresh if kv is None else kv.merge(fresh)
        assert kv is not None
        last = torch.tensor([[r.tokens[-1] if r.tokens else r.prompt[-1]] for r in kv.rows], dtype=torch.long)
        attn = torch.cat([kv.mask, torch.ones((len(kv.rows), 1), dtype=torch.long)], dim=1)
        pos = kv.mask.sum(-1, keepdim=True)  # real tokens before the fed one
        cache = kv.cache
        if cache is None:
            cache = DynamicCache(ddp_cache_data=kv.layers) if kv.layers else DynamicCache()
        logits = self._forward(last, attn, pos, cache).logits[:, -1].float().cpu()
        self._kv = KVBatch(kv.rows, _layers(cache), attn, cache)
        row = {id(r): i for i, r in enumerate(kv.rows)}
        return logits[torch.tensor([row[id(s)] for s in seqs])]
