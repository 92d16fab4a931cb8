"""Sieve: detect and filter knowledge poisoning in retrieval-augmented generation.

Runtime never touches the network: the Hugging Face offline switches are set on import.
"""
import os as _os

_os.environ.setdefault("HF_HUB_OFFLINE", "1")
_os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
_os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
_os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

__version__ = "0.1.0"
