"""Sieve: detect and filter knowledge poisoning in retrieval-augmented generation.

Runtime never touches the network: the Hugging Face offline switches are set on import.
"""
import os as _os

_os.environ.setdefault("HF_HUB_OFFLINE", "1")
_os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
_os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
_os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
# OpenMP threads sleep instead of spin-waiting between ops. Measured on the 2-core box under load:
# a MiniLM query took 2.5 s with spinning threads vs 22 ms passive. Must be set before torch loads.
_os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

__version__ = "0.1.0"
