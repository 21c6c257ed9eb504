"""GPU check of the vLLM inference path: processed log-probs and in-place weight reloads.

    python bench/gpu/check_vllm.py [--temperature 0.7] [--threshold 0.05] [--port 18000]

Needs CUDA and vLLM >= 0.10.2 (for --logprobs-mode processed_logprobs); without them it prints one
line and exits 2. It builds a small random Qwen3 checkpoint (char tokenizer, nothing downloaded),
starts vLLM's OpenAI server exactly as `opsctl launch` renders it (processed_logprobs,
--generation-config vllm, the vllm_ext worker extension and middleware), then:

1. samples completions at the given temperature through training.inference.client and compares the
   returned log-probs with the trainer's recomputation (training.model.token_logprobs at the same
   temperature): mean absolute difference under --threshold. The same comparison against the
   untempered (T = 1) log-probs shows the bias raw log-probs would have put in the importance ratio.
2. publishes new weights as the trainer does (weights/step_1 + STABLE), POSTs /update_weights, and
   checks the next completions match the new weights (and no longer the old ones); a directory
   without STABLE must be refused with HTTP 400.

Prints one JSON verdict ({"ok": ..., numbers}) and exits 0 when every check passed, else 1.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))


def fail_setup(msg: str) -> None:
    print(f"check_vllm: {msg}", file=sys.stderr)
    sys.exit(2)


def build_model(out: Path, seed: int) -> Path:
    """Random Qwen3 small enough to load in seconds, with logits spread enough that temperature
    visibly changes log-probs. Weights are rounded to bfloat16 so vLLM (bf16) and the trainer's
    float32 recomputation start from the same numbers."""
    import torch
    from transformers import AutoModelForCausalLM

    from training.config import ModelConfig
    from training.model import build_char_tokenizer, tiny_config

    tok = build_char_tokenizer()
    mc = ModelConfig(hidden_size=256, intermediate_size=512, num_hidden_layers=2, num_attention_heads=4,
                     num_key_value_heads=2, head_dim=64)
    config = tiny_config(mc, len(tok), tok)
    config.initializer_range = 0.08
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(config).to(torch.bfloat16).to(torch.float32)
    model.save_pretrained(out)
    tok.save_pretrained(out)
    return out


def recompute(model: Any, prompt: list[int], tokens: list[int], temperature: float) -> list[float]:
    import torch

    from training.model import token_logprobs

    ids = torch.tensor([prompt + tokens], device="cuda")
    with torch.no_grad():
        lp = token_logprobs(model, ids, torch.ones_like(ids), temperature)[0, len(prompt):]
    return [float(x) for x in lp]


def mean_abs(a: list[float], b: list[float]) -> float:
    return sum(abs(x - y) for x, y in zip(a, b, strict=True)) / max(len(a), 1)


def compare(client: Any, model_by_t: dict[str, Any], prompts: list[list[int]], t: float, seed: int) -> dict:
    """Mean |vLLM log-prob - recomputed| per model/temperature key ("t": tempered, "raw": T = 1)."""
    groups = client.complete(prompts, n=4, max_tokens=16, temperature=t, seed=seed)
    sums: dict[str, list[float]] = {k: [] for k in model_by_t}
    n_tokens = 0
    for prompt, group in zip(prompts, groups, strict=True):
        for c in group:
            n_tokens += len(c.tokens)
            for key, (model, temp) in model_by_t.items():
                diff = mean_abs(c.logprobs, recompute(model, prompt, c.tokens, temp))
                sums[key].append(diff * len(c.tokens))
    return {k: sum(v) / max(n_tokens, 1) for k, v in sums.items()} | {"tokens": n_tokens}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--temperature", type=float, default=0.7)
    ap.add_argument("--threshold", type=float, default=0.05)
    ap.add_argument("--port", type=int, default=18000)
    ap.add_argument("--startup-timeout", type=float, default=420.0)
    args = ap.parse_args()

    if importlib.util.find_spec("vllm") is None:
        fail_setup("vllm is not installed (needs vllm >= 0.10.2 with CUDA)")
    import torch

    if not torch.cuda.is_available():
        fail_setup("no CUDA device visible to torch")
    import vllm
    from safetensors.torch import save_file

    from training.fsutil import publish_dir
    from training.inference.client import OpenAICompatClient, ServerError
    from training.model import load_model

    verdict: dict[str, Any] = {"vllm": vllm.__version__, "gpu": torch.cuda.get_device_name(0),
                               "temperature": args.temperature, "threshold": args.threshold}
    work = Path(tempfile.mkdtemp(prefix="check-vllm-"))
    model_dir = build_model(work / "model", seed=0)
    log = open(work / "vllm.log", "w")  # noqa: SIM115 - open for the server's whole life
    cmd = [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", str(model_dir),
           "--served-model-name", "tiny", "--host", "127.0.0.1", "--port", str(args.port),
           "--dtype", "bfloat16", "--max-model-len", "256", "--gpu-memory-utilization", "0.3",
           "--enforce-eager", "--logprobs-mode", "processed_logprobs", "--generation-config", "vllm",
           "--worker-extension-cls", "training.inference.vllm_ext.WeightReloadExtension",
           "--middleware", "training.inference.vllm_ext.UpdateWeightsMiddleware"]
    env = {**os.environ, "PYTHONPATH": f"{ROOT}:{os.environ.get('PYTHONPATH', '')}"}
    t0 = time.monotonic()
    server = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    try:
        client = OpenAICompatClient(f"http://127.0.0.1:{args.port}", model="tiny", timeout=120)
        try:
            client.wait_ready(args.startup_timeout)
        except ServerError as exc:
            tail = (work / "vllm.log").read_text(errors="replace").splitlines()[-15:]
            verdict.update(ok=False, error=f"vLLM did not start: {exc}", log_tail=tail)
            print(json.dumps(verdict))
            return 1
        verdict["startup_s"] = round(time.monotonic() - t0, 1)
        old = load_model(model_dir, "float32", "cuda")
        prompts = [[1, *range(4 + i, 10 + i)] for i in range(8)]  # <bos> and a few characters
        t = args.temperature
        before = compare(client, {"t": (old, t), "raw": (old, 1.0)}, prompts, t, seed=1)
        verdict["mean_abs_diff"] = round(before["t"], 5)
        verdict["mean_abs_diff_untempered"] = round(before["raw"], 5)
        verdict["tokens"] = before["tokens"]

        new_sd = {k: (v + 0.05 * torch.randn_like(v)).to(torch.bfloat16).to(torch.float32).contiguous()
                  for k, v in old.state_dict().items()}
        cpu_sd = {k: v.cpu() for k, v in new_sd.items()}
        wdir = publish_dir(work / "weights" / "step_1",
                           lambda d: save_file(cpu_sd, str(d / "model.safetensors")))
        (work / "weights" / "step_2").mkdir()
        try:
            client.update_weights(str(work / "weights" / "step_2"), 2)
            verdict["uncommitted_refused"] = False
        except ServerError as exc:
            verdict["uncommitted_refused"] = exc.status == 400
        verdict["update_s"] = round(client.update_weights(str(wdir), 1), 3)
        new = load_model(model_dir, "float32", "cuda")
        new.load_state_dict(new_sd)
        after = compare(client, {"new": (new, t), "old": (old, t)}, prompts, t, seed=2)
        verdict["after_update_mean_abs_diff"] = round(after["new"], 5)
        verdict["after_update_vs_old_weights"] = round(after["old"], 5)
        verdict["ok"] = bool(
            before["t"] < args.threshold
            and before["raw"] > 2 * before["t"]
            and verdict["uncommitted_refused"]
            and after["new"] < args.threshold
            and after["old"] > 2 * after["new"]
        )
        print(json.dumps(verdict))
        return 0 if verdict["ok"] else 1
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        try:
            server.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(server.pid, signal.SIGKILL)
        log.close()


if __name__ == "__main__":
    sys.exit(main())
