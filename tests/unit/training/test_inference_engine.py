import threading
from pathlib import Path

import torch

from training.inference.engine import Engine
from training.model import load_model, load_tokenizer


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


def run_requests(eng: Engine, temperature: float) -> list[list[object]]:
    """Prompts of different lengths (one of a single token), joining a running batch at different
    steps, some finishing early: rows join, leave and are re-aligned in the cache."""
    reqs = [eng.submit([[1, 5, 6], [1, 9, 9, 9, 9, 9, 9, 7], [3]], n=2, max_tokens=12,
                       temperature=temperature, seed=4)]
    while eng.steps < 3:
        pass
    reqs.append(eng.submit([[1, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7]], n=2, max_tokens=5,
                           temperature=temperature, seed=5))
    reqs.append(eng.submit([[1, 8]], n=3, max_tokens=20, temperature=temperature, seed=6))
    return [[(s.tokens, s.logprobs) for s in r.wait(60)] for r in reqs]


def test_kv_cache_gives_the_outputs_of_full_recomputation(tiny_model_dir: Path) -> None:
    tok = load_tokenizer(tiny_model_dir)
    cached = Engine(load_model(tiny_model_dir), tok.pad_token_id, set(), 4)
    plain = Engine(load_model(tiny_model_dir), tok.pad_token_id, set(), 4, kv_cache=False)
    try:
        assert cached.kv is not None and plain.kv is None
        for temperature in (0.0, 1.0):  # greedy, and seeded sampling
            a, b = run_requests(cached, temperature), run_requests(plain, temperature)
            for ra, rb in zip(a, b, strict=True):
                for (ta, la), (tb, lb) in zip(ra, rb, strict=True):
                    assert ta == tb
                    assert torch.allclose(torch.tensor(la), torch.tensor(lb), atol=1e-4)
    finally:
        cached.stop()
        plain.stop()


def test_kv_cache_is_rebuilt_with_new_weights(tiny_model_dir: Path) -> None:
    tok = load_tokenizer(tiny_model_dir)
    eng = Engine(load_model(tiny_model_dir), tok.pad_token_id, set(), 4)
    ref = Engine(load_model(tiny_model_dir), tok.pad_token_id, set(), 4, kv_cache=False)
    new = {k: v + 0.05 * torch.randn_like(v) for k, v in load_model(tiny_model_dir).state_dict().items()}
    try:
        outs = []
        for e in (eng, ref):
            e.pause()
            req = e.submit([[1, 5, 6, 7]], n=2, max_tokens=16, temperature=0.0)
            e.resume()
            while e.steps < 4:
                pass
            e.update_weights(new, 1)
            outs.append(req.wait(60))
        for s, r in zip(*outs, strict=True):
            # Tokens after the update are the new policy's, on a prefix recomputed with it.
            assert s.versions == r.versions and 1 in s.versions and s.tokens == r.tokens
            assert torch.allclose(torch.tensor(s.logprobs), torch.tensor(r.logprobs), atol=1e-4)
    finally:
        eng.stop()
        ref.stop()
