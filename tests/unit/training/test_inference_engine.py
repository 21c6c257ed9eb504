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
