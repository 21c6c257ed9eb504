"""Orchestrator: rollouts, advantages, async bounds and packing (see __main__ for the process)."""
