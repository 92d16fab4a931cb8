"""Process environment of Sieve's own programs (the CLI, the service, the dashboard, the benches).

Importing :mod:`sieve` changes nothing in the environment: a library user's process is theirs. The
entry points call :func:`configure_process_environment` first, before anything imports torch. The
library itself never relies on these variables to stay offline: the model loaders pass
``local_files_only=True`` (docs/models.md).
"""
from __future__ import annotations

import os

#: Set by :func:`configure_process_environment` unless already set (the user's value wins).
PROCESS_ENVIRONMENT: dict[str, str] = {
    # Hugging Face libraries never look anything up on the network (belt and braces: the loaders
    # already pass local_files_only=True).
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "HF_DATASETS_OFFLINE": "1",
    # No fork warning from the Rust tokenizers when a process forks after tokenising.
    "TOKENIZERS_PARALLELISM": "false",
    # OpenMP threads sleep instead of spin-waiting between ops. Measured on the 2-core box under load:
    # a MiniLM query took 2.5 s with spinning threads vs 22 ms passive. Read when torch loads, so it
    # must be set before the first ``import torch``.
    "OMP_WAIT_POLICY": "PASSIVE",
}


def configure_process_environment() -> None:
    """Give this process Sieve's runtime settings (:data:`PROCESS_ENVIRONMENT`), keeping any value
    already set. Call it at the top of an entry point, before torch is imported."""
    for name, value in PROCESS_ENVIRONMENT.items():
        os.environ.setdefault(name, value)
