"""``sieve serve``: Sieve as an HTTP service in front of a RAG stack (docs/service.md).

A face over the library (docs/architecture.md): it never imports the CLI, the dashboard or the
adapters. :func:`create_app` builds the FastAPI app from a :class:`ServiceState`.
"""
from sieve.service.app import API_VERSION, ServiceState, create_app
from sieve.service.limits import Limits

__all__ = ["create_app", "ServiceState", "Limits", "API_VERSION"]
