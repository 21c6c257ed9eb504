# Ansible managed
# Run with the new virtualenv's python before `current` points at it: the modules import and a
# tiny model of training.model runs one forward and backward pass on the CPU. Prints one JSON line.
import importlib
import json
import sys

import torch
from transformers import AutoModelForCausalLM

from training.config import ModelConfig
from training.model import build_char_tokenizer, tiny_config

for name in ["torch", "opsctl", "training", "training.model"]:
    importlib.import_module(name)

tokenizer = build_char_tokenizer()
torch.manual_seed(0)
model = AutoModelForCausalLM.from_config(tiny_config(ModelConfig(), len(tokenizer), tokenizer))
ids = torch.tensor([tokenizer.encode("12+34=46\n")])
out = model(input_ids=ids, labels=ids)
out.loss.backward()
if out.logits.shape != (1, ids.shape[1], len(tokenizer)) or not torch.isfinite(out.loss):
    sys.exit(f"training runtime: forward pass gave logits {tuple(out.logits.shape)}, loss {out.loss.item()}")
print(json.dumps({"python": sys.version.split()[0], "torch": torch.__version__,
                  "prefix": sys.prefix, "loss": round(out.loss.item(), 4)}))
