"""Query-time and corpus-time defenses, one module per method, all behind :class:`Defense`.

Use :data:`sieve.registry.DEFENSES` to list and create them by their registered name.
"""
from sieve.defenses.base import Defense, finalize_context

__all__ = ["Defense", "finalize_context"]
