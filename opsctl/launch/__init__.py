"""Launching training jobs: config resolution, the run directory, and the local process launcher."""
