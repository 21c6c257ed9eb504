"""The GPU side of trainer/checkpoint.py on one CUDA device: an NCCL process group of one rank,
FSDP2 DTensor shards in bfloat16, meta-device build, sharded initial load, DCP save, streamed
sharded weight publication, and a load of that checkpoint into a plain CPU model. Skipped without CUDA
(the CPU/gloo path is test_reshard_resume.py)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import torch.distributed as dist

from training.config import load_config
from training.model import create_tiny_model, load_model
from training.rundir import RunDir, free_port
from training.trainer import checkpoint
from training.weights import load_trainer_state

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
]


def test_fsdp_checkpoint_and_publication_on_cuda(tmp_path: Path) -> None:
    cfg = load_config(None, ["sft.enabled=false", "model.dtype=bfloat16", "trainer.checkpoint_every=1"])
    run = RunDir(tmp_path / "run")
    path = create_tiny_model(cfg.model, run.base_model, seed=0)
    dist.init_process_group("nccl", init_method=f"tcp://127.0.0.1:{free_port()}", rank=0, world_size=1)
    try:
        dev = torch.device("cuda:0")
        model = checkpoint.build_model(path, "bfloat16", dev, fsdp=True)
        checkpoint.load_initial_weights(model, path, "bfloat16")
        ref = load_model(path, "bfloat16").state_dict()
        got = {k: v.full_tensor().cpu() for k, v in model.state_dict().items()}
        assert all(torch.equal(got[k], ref[k]) for k in ref)

        opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
        sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 1.0)
        ids = torch.randint(4, 40, (2, 8), device=dev)
        model(input_ids=ids, labels=ids).loss.backward()
        opt.step()
        sched.step()
        checkpoint.save_checkpoint(run, model, opt, sched, step=1)
        checkpoint.publish_weights(run, cfg, model, step=1, rank=0)
        trained = {k: v.full_tensor().cpu() for k, v in model.state_dict().items()}
        published = load_trainer_state(run.step(run.weights, 1))
        assert all(torch.equal(published[k], trained[k]) for k in trained)
        assert any(not torch.equal(trained[k], ref[k]) for k in ref)

        cpu = checkpoint.build_model(path, "bfloat16", torch.device("cpu"), fsdp=False)
        opt2 = torch.optim.AdamW(cpu.parameters(), lr=1e-2)
        sched2 = torch.optim.lr_scheduler.LambdaLR(opt2, lambda s: 1.0)
        assert checkpoint.load_checkpoint(run, 1, cpu, opt2, sched2) == 1
        assert all(torch.equal(v, trained[k]) for k, v in cpu.state_dict().items())
    finally:
        dist.destroy_process_group()
