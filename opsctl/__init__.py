"""opsctl: provision and operate a GPU cluster for RL training."""

__version__ = "0.1.0"
