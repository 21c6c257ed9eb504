"""Peak tensor memory of a piece of code, from torch's profiler memory accounting (CPU tensors).

The profiler records every tensor allocation and free; its memory timeline (torch's
`_memory_profiler`, the data behind `export_memory_timeline`) coalesces them per timestamp, and the
peak is the largest total alive. Used by the chunked log-prob test and bench/bench_logprob_memory.py.
"""

from __future__ import annotations

from collections.abc import Callable

from torch.profiler import ProfilerActivity, profile


def peak_tensor_bytes(fn: Callable[[], object], device: str = "cpu") -> int:
    """The most tensor memory alive at once while `fn` runs (bytes; tensors made before it excluded)."""
    from torch.profiler._memory_profiler import MemoryProfileTimeline

    with profile(activities=[ProfilerActivity.CPU], profile_memory=True, record_shapes=True,
                 with_stack=True) as prof:
        fn()
    _, sizes = MemoryProfileTimeline(prof._memory_profile())._coalesce_timeline(device)
    return max((sum(s) for s in sizes), default=0)


__all__ = ["peak_tensor_bytes"]
