import threading
import time
from pathlib import Path

import pytest
import torch

from training.inference.engine import Engine, Sequence
from training.model import load_model, token_logprobs
from training.tokenizer import load_tokenizer


def make_engine(path: Path, max_batch_size: int = 8) -> tuple[Engine, object]:
    tok = load_tokenizer(path)
    stop: set[int] = set()  # only length stops, so requests have known lengths
    return Engine(load_model(path), tok.pad_token_id, stop, max_batch_size), tok


def test_same_seed_same_samples_whatever_else_is_in_the_batch(tiny_model_dir: Path) -> None:
    eng, _ = make_engine(tiny_model_dir)
    try:
        a = eng.submit([[1, 5, 6]], n=3, max_tokens=6, temperature=1.0, seed=7).wait(30)
        other = eng.submit([[1, 9, 9, 9, 9]], n=4, max_tokens=12, temperature=1.0, seed=1)
        b = eng.submit([[1, 5, 6]], n=3, max_tokens=6, temperature=1.0, seed=7).wait(30)
        other.wait(30)
        assert [s.tokens for s in a] == [s.tokens for s in b]
        assert all(len(s.tokens) == 6 and s.finish_reason == "length" for s in a)
        # The n samples of one prompt differ from each other (own generators).
        assert len({tuple(s.tokens) for s in a}) > 1
    finally:
        eng.stop()


def test_continuous_batching_lets_short_requests_finish_first(tiny_model_dir: Path) -> None:
    eng, _ = make_engine(tiny_model_dir, max_batch_size=4)
    try:
        eng.pause()
        long = eng.submit([[1, 5]], n=2, max_tokens=40, temperature=1.0, seed=1)
        eng.resume()
        while eng.steps < 3:
            pass
        short = eng.submit([[1, 6]], n=2, max_tokens=3, temperature=1.0, seed=2)
        short.wait(30)
        # The short request joined the running batch and left it while the long one is still going.
        assert not long.done.is_set()
        long.wait(60)
        assert all(len(s.tokens) == 40 for s in long.seqs)
    finally:
        eng.stop()


def test_weight_update_keeps_in_flight_requests(tiny_model_dir: Path) -> None:
    eng, _ = make_engine(tiny_model_dir, max_batch_size=4)
    try:
        req = eng.submit([[1, 5, 6]], n=2, max_tokens=60, temperature=1.0, seed=3)
        while eng.steps < 5:
            pass
        new = {k: v + 0.01 * torch.randn_like(v) for k, v in eng.model.state_dict().items()}
        paused_for = eng.update_weights(new, version=1)
        seqs = req.wait(60)
        assert paused_for >= 0
        for s in seqs:
            assert len(s.tokens) == 60  # nothing dropped or restarted
            assert s.versions[0] == 0 and s.versions[-1] == 1
            assert s.versions == sorted(s.versions)
        assert eng.version == 1
    finally:
        eng.stop()


def test_pause_blocks_generation_until_resume(tiny_model_dir: Path) -> None:
    eng, _ = make_engine(tiny_model_dir)
    try:
        eng.pause()
        req = eng.submit([[1, 5]], n=1, max_tokens=4, temperature=0.0)
        assert not req.done.wait(0.3)
        assert eng.steps == 0
        threading.Timer(0.1, eng.resume).start()
        assert req.wait(30)[0].finish_reason == "length"
    finally:
        eng.stop()


def run_mixed_workload(path: Path, kv_cache: bool) -> list[Sequence]:
    """Prompts of different lengths (one of them BOS only), greedy and sampled, with a request that
    joins the running batch mid-way and short ones that leave it early: max_batch_size=4 makes
    sequences wait and join as others finish."""
    tok = load_tokenizer(path)
    eng = Engine(load_model(path), tok.pad_token_id, set(), max_batch_size=4, kv_cache=kv_cache)
    try:
        eng.pause()
        greedy = eng.submit([[1, 5, 6], [1, 7, 8, 9, 10, 11, 12], [1]], n=2, max_tokens=12, temperature=0.0)
        sampled = eng.submit([[1, 9], [1, 20, 21, 22, 23]], n=1, max_tokens=20, temperature=1.0, seed=3)
        eng.resume()
        while eng.steps < 4:
            time.sleep(0.001)
        late = eng.submit([[1, 30, 31, 32, 33, 34, 35, 36, 37, 38]], n=2, max_tokens=5, temperature=0.0)
        return [s for r in (greedy, sampled, late) for s in r.wait(60)]
    finally:
        eng.stop()


def test_kv_cache_gives_the_same_tokens_and_logprobs_as_recomputing(tiny_model_dir: Path) -> None:
    cached = run_mixed_workload(tiny_model_dir, kv_cache=True)
    full = run_mixed_workload(tiny_model_dir, kv_cache=False)
    assert len(cached) == len(full) == 10
    for a, b in zip(cached, full, strict=True):
        assert a.tokens == b.tokens
        assert len(a.tokens) == a.max_tokens
        assert max(abs(x - y) for x, y in zip(a.logprobs, b.logprobs, strict=True)) <= 1e-5


def test_kv_cache_is_rebuilt_after_a_weight_update(tiny_model_dir: Path) -> None:
    # Every token's logprob must be the one the weights of its own version give: keys and values
    # cached under the old weights must not leak into steps after the update.
    eng, _ = make_engine(tiny_model_dir, max_batch_size=4)
    old = {k: v.clone() for k, v in eng.model.state_dict().items()}
    new = {k: v + 0.05 * torch.randn_like(v) for k, v in old.items()}
    prompts = [[1, 5, 6, 7], [1, 8]]
    try:
        req = eng.submit(prompts, n=1, max_tokens=30, temperature=1.0, seed=5)
        while eng.steps < 5:
            time.sleep(0.001)
        eng.update_weights(new, version=1)
        seqs = req.wait(60)
    finally:
        eng.stop()
    models = {0: load_model(tiny_model_dir), 1: load_model(tiny_model_dir)}
    models[1].load_state_dict(new)
    for prompt, s in zip(prompts, seqs, strict=True):
        assert s.versions[0] == 0 and s.versions[-1] == 1
        ids = torch.tensor([prompt + s.tokens])
        for version, model in models.items():
            lp = token_logprobs(model, ids, torch.ones_like(ids))[0, len(prompt) :]
            mine = [i for i, v in enumerate(s.versions) if v == version]
            assert torch.allclose(lp[mine], torch.tensor(s.logprobs)[mine], atol=1e-5)


def test_stop_strings_end_a_sequence_at_their_first_occurrence(tiny_model_dir: Path) -> None:
    tok = load_tokenizer(tiny_model_dir)

    def detok(ids: list[int]) -> str:
        return str(tok.decode(ids, skip_special_tokens=True))

    eng = Engine(load_model(tiny_model_dir), tok.pad_token_id, set(), 8, detokenize=detok)
    try:
        free = eng.submit([[1, 5, 6]], max_tokens=12, temperature=0.0).wait(30)[0]
        text = detok(free.tokens)
        # A two-character stop string taken from the middle of the greedy continuation.
        stop = text[5:7]
        first = text.index(stop) + len(stop)
        s = eng.submit([[1, 5, 6]], max_tokens=12, temperature=0.0, stop=["never", stop]).wait(30)[0]
        assert (s.finish_reason, s.stop_reason) == ("stop", stop)
        assert detok(s.tokens) == text[:first]  # the tokens keep the stop string's own tokens
        assert s.tokens == free.tokens[: len(s.tokens)]
        unmatched = eng.submit([[1, 5, 6]], max_tokens=12, temperature=0.0, stop=["@@"]).wait(30)[0]
        assert (unmatched.finish_reason, unmatched.stop_reason) == ("length", None)
    finally:
        eng.stop()
    bare = Engine(load_model(tiny_model_dir), tok.pad_token_id, set(), 8)
    try:
        with pytest.raises(ValueError, match="detokenizer"):
            bare.submit([[1, 5]], stop=["\n"])
    finally:
        bare.stop()


def test_kv_cache_is_refused_at_start_for_sliding_window_layers(tiny_model_dir: Path) -> None:
    """A sliding-window cache cannot be padded and merged across the running batch: the engine
    says so when it is built (a config error), not in the middle of a decode step."""
    from transformers import Qwen3Config, Qwen3ForCausalLM

    from training.inference.engine import CacheUnsupported

    base = load_model(tiny_model_dir).config.to_dict()
    base.update(use_sliding_window=True, sliding_window=4, max_window_layers=0, layer_types=None)
    model = Qwen3ForCausalLM(Qwen3Config(**base))
    assert "sliding_attention" in model.config.layer_types
    with pytest.raises(CacheUnsupported, match=r"inference\.kv_cache"):
        Engine(model, 0, set(), kv_cache=True)
    Engine(model, 0, set(), kv_cache=False).stop()  # recomputing the prefix works for any layer
    Engine(load_model(tiny_model_dir), 0, set(), kv_cache=True).stop()


def test_a_cancelled_request_leaves_the_batch_and_the_others_are_unchanged(tiny_model_dir: Path) -> None:
    eng, _ = make_engine(tiny_model_dir, max_batch_size=3)
    try:
        eng.pause()
        doomed = eng.submit([[1, 5, 6]], n=2, max_tokens=200, temperature=1.0, seed=4)
        kept = eng.submit([[1, 9, 8, 7]], n=1, max_tokens=40, temperature=1.0, seed=6)
        queued = eng.submit([[1, 7]], n=1, max_tokens=5, temperature=1.0, seed=8)  # no room: waits
        eng.resume()
        while eng.steps < 4:
            time.sleep(0.001)
        eng.pause()  # no step runs between counting the tokens and the cancel
        so_far = [len(s.tokens) for s in doomed.seqs]
        eng.cancel(doomed)
        eng.cancel(queued)
        assert eng.in_flight() == 4  # dropped by the loop at its next step, not by cancel()
        eng.resume()
        assert doomed.wait(30) and queued.wait(30)
        eng.pause()  # the step after the drop has run: the cache holds the kept request's row only
        assert eng._kv is not None and [id(r) for r in eng._kv.rows] == [id(s) for s in kept.seqs]
        eng.resume()
        # Not one token after the cancel, far short of max_tokens; the queued one never started.
        assert [len(s.tokens) for s in doomed.seqs] == so_far and max(so_far) < 200
        assert all(s.finish_reason == "abort" for s in doomed.seqs + queued.seqs)
        assert queued.seqs[0].tokens == []
        mixed = kept.wait(60)[0]
        assert eng.in_flight() == 0
        alone = eng.submit([[1, 9, 8, 7]], n=1, max_tokens=40, temperature=1.0, seed=6).wait(60)[0]
    finally:
        eng.stop()
    assert mixed.finish_reason == "length" and mixed.tokens == alone.tokens
    assert max(abs(x - y) for x, y in zip(mixed.logprobs, alone.logprobs, strict=True)) <= 1e-5
