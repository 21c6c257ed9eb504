"""prime-rl-style training jobs: SFT and asynchronous off-policy RL."""
