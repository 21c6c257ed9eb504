"""Inference server process.

    python -m training.inference --run-dir RUN_DIR

Loads the checkpoint RL starts from and announces its URL as peers/inference-<i>.json, where i is
INFERENCE_INDEX, else SLURM_PROCID, else 0.
"""

from __future__ import annotations

import logging
import os
import signal
import socket
import sys
import threading

import torch

from training.common import parse_args, set_threads
from training.inference.chat_api import tool_parser_for
from training.inference.engine import CacheUnsupported, Engine
from training.inference.server import InferenceServer
from training.model import load_model
from training.tokenizer import load_tokenizer

log = logging.getLogger("inference")


def main(argv: list[str] | None = None) -> None:
    run, cfg = parse_args("training.inference", argv)
    set_threads(cfg.inference.threads)
    index = int(os.environ.get("INFERENCE_INDEX", os.environ.get("SLURM_PROCID", "0")))
    device = f"cuda:{index % torch.cuda.device_count()}" if torch.cuda.is_available() else "cpu"
    path = run.initial_model(cfg)
    model = load_model(path, cfg.model.dtype, device)
    tokenizer = load_tokenizer(path)
    # EOS ends every sequence; environment-specific stops (e.g. the newline after an answer) come
    # with each request as OpenAI `stop` strings.
    stop_ids = {tokenizer.eos_token_id} - {None}
    try:
        engine = Engine(
            model,
            tokenizer.pad_token_id,
            stop_ids,
            cfg.inference.max_batch_size,
            0,
            device,
            kv_cache=cfg.inference.kv_cache,
        )
    except CacheUnsupported as exc:
        print(f"training.inference: error: {exc}", file=sys.stderr)
        sys.exit(2)
    parser = tool_parser_for(cfg.inference.tool_call_parser, str(getattr(model.config, "model_type", "")))
    server = InferenceServer(engine, tokenizer, str(path), cfg.inference.host, cfg.inference.port, parser)
    host = cfg.inference.host if cfg.inference.host not in ("0.0.0.0", "") else socket.gethostname()
    url = f"http://{host}:{server.port}"
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    server.start()
    run.announce(f"inference-{index}", {"url": url, "pid": os.getpid()})
    log.info("serving %s on %s", path, url)
    stop.wait()
    server.shutdown()
    log.info("stopped")


if __name__ == "__main__":
    main()
