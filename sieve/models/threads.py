"""Process-wide torch settings applied once before a model is loaded."""
from __future__ import annotations

import os

_THREADS_SET = False


def configure_threads() -> None:
    """torch uses the CPUs this process may run on (2 here), or ``$SIEVE_THREADS``; quiet loading."""
    global _THREADS_SET
    if _THREADS_SET:
        return
    import torch

    n = int(os.environ.get("SIEVE_THREADS") or len(os.sched_getaffinity(0)) or 1)
    torch.set_num_threads(max(1, n))
    try:  # weight-loading bars are noise; Sieve prints its own progress for cache builds
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()
    except ImportError:  # pragma: no cover
        pass
    _THREADS_SET = True
