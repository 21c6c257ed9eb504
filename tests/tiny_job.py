"""Overrides of training/configs/demo.toml that make the tiny CPU job the launch, training and lab
tests run: a short SFT, small batches and completions, no held-out evaluation. (tests/ is on
sys.path through its conftest.py.)"""

TINY_JOB = [
    "sft.steps=20",
    "sft.num_demos=64",
    "eval.size=0",
    "orchestrator.batch_groups=4",
    "orchestrator.group_size=4",
    "inference.max_tokens=4",
    "env.kwargs={digits = 2, num_train = 400, num_eval = 20}",
]
