"""Values that are part of artifact-cache keys or shared defaults, defined once.

Changing one of these changes the key under which per-document artifacts are cached
(``nll@<LM_TRACE_TOKENS>``, ``states@<TOKEN_STATE_TOKENS>``), so old cache entries are simply not
reused; nothing stale is ever read. See ``docs/models.md`` (artifact cache).
"""
from __future__ import annotations

#: Tokens of each passage scored by the causal LM (RSQ E_p trace, perplexity filter). RAGSieve §6.1.
LM_TRACE_TOKENS = 512
#: Tokens of each passage encoded for BERTScore token states (RSQ E_s). RAGSieve §6.1.
TOKEN_STATE_TOKENS = 256
#: Default clean-removal budget used when calibrating any threshold on clean queries (docs/algorithms.md §9.2).
CLEAN_BUDGET = 0.05
#: Default retrieval depth (documents ranked per query) and generation context size.
DEPTH = 50
K_CTX = 5
#: Condition name of the unattacked corpus.
CLEAN = "clean"
