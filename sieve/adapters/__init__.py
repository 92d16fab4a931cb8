"""Framework adapters (a face; docs/architecture.md): LangChain (sieve/adapters/langchain.py) and
LlamaIndex (sieve/adapters/llamaindex.py), each usable in-process (:class:`LocalSieve`) or as a
client of ``sieve serve`` (:class:`SieveClient`, JSON over HTTP). The framework modules are
imported on demand (optional extras)."""
from sieve.adapters.client import DEFAULT_DEFENSE, LocalSieve, SieveClient, SieveError

__all__ = ["DEFAULT_DEFENSE", "LocalSieve", "SieveClient", "SieveError"]
