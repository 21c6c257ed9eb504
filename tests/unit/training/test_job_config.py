from pathlib import Path

import pytest

from training.config import ConfigError, apply_override, dump_toml, load_config

DEMO = Path(__file__).resolve().parents[3] / "training" / "configs" / "demo.toml"


def test_demo_config_loads_and_round_trips(tmp_path: Path) -> None:
    cfg = load_config(DEMO)
    assert cfg.env.name == "arithmetic"
    out = tmp_path / "resolved.toml"
    out.write_text(dump_toml(cfg))
    assert load_config(out) == cfg


def test_overrides_are_typed() -> None:
    cfg = load_config(
        DEMO,
        [
            "trainer.lr=1e-4",
            "orchestrator.async_level=2",
            "env.kwargs={digits = 3}",
            "inference.backend=builtin",
            "trainer.betas=[0.8, 0.9]",
        ],
    )
    assert cfg.trainer.lr == 1e-4
    assert cfg.orchestrator.async_level == 2
    assert cfg.env.kwargs == {"digits": 3}
    assert cfg.trainer.betas == [0.8, 0.9]


@pytest.mark.parametrize(
    ("override", "key"),
    [
        ("trainer.lrr=1", "trainer.lrr"),
        ("nosuch.x=1", "nosuch"),
        ("trainer.lr=fast", "trainer.lr"),
        ("trainer.steps=1.5", "trainer.steps"),
        ("orchestrator.async_level=-1", "orchestrator.async_level"),
        ("orchestrator.group_size=1", "orchestrator.group_size"),
        ("sft.enabled=1", "sft.enabled"),
        ("inference.backend=tgi", "inference.backend"),
        ("env.name=chess", "env.name"),
        ("trainer.mask_ratio_low=2.0", "trainer.mask_ratio_low"),
        ("orchestrator.pack_row_tokens=0", "orchestrator.pack_row_tokens"),
        ("trainer=3", "trainer"),
        ("trainer.lr_schedule=linear", "trainer.lr_schedule"),
        ("sft.lr_schedule=step", "sft.lr_schedule"),
        ("trainer.min_lr_ratio=1.5", "trainer.min_lr_ratio"),
    ],
)
def test_bad_values_name_the_key(override: str, key: str) -> None:
    with pytest.raises(ConfigError, match=key.replace(".", r"\.")):
        load_config(DEMO, [override])


def test_malformed_override() -> None:
    with pytest.raises(ConfigError, match="KEY=VALUE"):
        apply_override({}, "trainer.lr")


def test_bad_toml_file(tmp_path: Path) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text("[trainer\nlr = 1")
    with pytest.raises(ConfigError, match=r"bad\.toml"):
        load_config(bad)
    with pytest.raises(ConfigError, match="not found"):
        load_config(tmp_path / "missing.toml")


def test_learning_rate_schedules() -> None:
    from training.common import lr_factor

    # linear warmup, then flat
    assert [lr_factor(s, warmup=4, total=100, schedule="constant") for s in (0, 1, 3, 50, 99)] == [
        0.25,
        0.5,
        1.0,
        1.0,
        1.0,
    ]
    # cosine over all `total` steps down to the floor, and no further
    cos = [lr_factor(s, warmup=1, total=100, schedule="cosine", floor=0.1) for s in (0, 50, 100, 150)]
    assert cos == pytest.approx([1.0, 0.55, 0.1, 0.1])
    assert lr_factor(0, warmup=10, total=100, schedule="cosine") == pytest.approx(0.1)
    with pytest.raises(ValueError, match="unknown learning-rate schedule"):
        lr_factor(0, warmup=1, total=10, schedule="linear")

