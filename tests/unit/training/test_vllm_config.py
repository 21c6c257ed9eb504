"""The [inference] keys of the vLLM path: checked like every other key, one line naming it."""

from __future__ import annotations

from pathlib import Path

import pytest

from opsctl.cli import main
from training.config import ConfigError, dump_toml, load_config

ROOT = Path(__file__).resolve().parents[3]
DEMO = ROOT / "training" / "configs" / "demo.toml"
VLLM = ["inference.backend=vllm", "model.path=/models/m"]


def test_vllm_keys_round_trip(tmp_path: Path) -> None:
    cfg = load_config(DEMO, [*VLLM, "inference.tensor_parallel_size=2", 'inference.stop=["\\n"]',
                             "inference.served_model_name=p1", 'inference.vllm_args=["--seed", "3"]'])
    assert (cfg.inference.tensor_parallel_size, cfg.inference.stop) == (2, ["\n"])
    (tmp_path / "c.toml").write_text(dump_toml(cfg))
    assert load_config(tmp_path / "c.toml") == cfg


@pytest.mark.parametrize(
    ("override", "key"),
    [
        ("inference.tensor_parallel_size=0", "inference.tensor_parallel_size"),
        ("inference.vllm_port=70000", "inference.vllm_port"),
        ("inference.gpu_memory_utilization=1.5", "inference.gpu_memory_utilization"),
        ('inference.served_model_name="a b"', "inference.served_model_name"),
        ('inference.stop=[""]', "inference.stop"),
        ("inference.ready_timeout_s=0", "inference.max_model_len/ready_timeout_s"),
    ],
)
def test_bad_vllm_values_name_the_key(override: str, key: str) -> None:
    with pytest.raises(ConfigError, match=key.replace(".", r"\.")):
        load_config(DEMO, [*VLLM, override])


def test_local_launch_needs_running_vllm_servers(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    args = ["launch", "rl-run", "--local", "--job", str(DEMO), "--output", str(tmp_path / "r")]
    for ov in VLLM:
        args += ["-o", ov]
    with pytest.raises(SystemExit) as exc:
        main(args)
    err = capsys.readouterr().err.strip()
    assert exc.value.code == 2
    assert err == ("opsctl: error: inference.urls: --local does not start vLLM; "
                   "give the running servers' base URLs")
    assert not (tmp_path / "r").exists()
