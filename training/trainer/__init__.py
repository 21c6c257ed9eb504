"""Trainer: importance-ratio loss, AdamW, gradient clipping, gloo (CPU) or NCCL + FSDP (GPU)."""
