"""Parameter handling shared by defenses and attacks (scikit-learn's estimator contract).

* ``__init__`` only validates and stores its arguments (``Params.__init__(self, **kw)`` sets them
  as attributes); the parameters of a class ARE the named arguments of its ``__init__`` signature.
  ``**kwargs`` is not a parameter: every real parameter must be spelled out.
* :meth:`Params.get_params` returns the current value of every ``__init__`` parameter;
  :meth:`Params.set_params` changes them and raises :class:`UnknownParameterError` (a
  ``ValueError`` and a ``TypeError``) for an unknown name, naming the object, the bad key(s) and the
  valid ones. Constructing with an unknown keyword raises the same error (checked in ``__new__``,
  before ``__init__`` runs).
* Learned attributes end in ``_``.

Class metadata — ``name``, ``summary`` (one line), ``paper`` (paper + section, citing
``docs/algorithms.md``), ``needs`` (:data:`sieve.registry.RESOURCE_ROLES` names) and ``presets``
(extra registered names: ``{name: {"params": {...}, "summary": ..., "needs": ..., "paper": ...}}``)
— is declared once on the class and read by :mod:`sieve.registry`.
"""
from __future__ import annotations

import inspect
from typing import Any, ClassVar


class UnknownParameterError(TypeError, ValueError):
    """An unknown parameter name (construction, ``set_params``, ``Registry.create``). Both a
    :class:`TypeError` (like any unexpected keyword) and a :class:`ValueError` (a bad value of a
    configuration mapping such as a calibration YAML)."""


def unknown_parameter_message(label: str, bad: list[str] | set[str], valid: list[str]) -> str:
    """``"rsq: unknown parameter 'threshold'; valid parameters: eta_q, refill, …"``."""
    bad = sorted(bad)
    noun = "parameter" if len(bad) == 1 else "parameters"
    return (f"{label}: unknown {noun} {', '.join(repr(b) for b in bad)}; "
            f"valid parameters: {', '.join(valid) if valid else '(none)'}")


#: ``__init__`` function → its parameter names (:meth:`Params.param_names`).
_PARAM_NAMES: dict[Any, tuple[str, ...]] = {}


class Params:
    name: ClassVar[str] = "base"
    summary: ClassVar[str] = ""
    paper: ClassVar[str] = ""
    needs: ClassVar[tuple[str, ...]] = ()
    #: Extra registered names of this class: ``{name: {"params": {...}, "summary"?, "paper"?, "needs"?}}``.
    presets: ClassVar[dict[str, dict[str, Any]]] = {}
    registry_name: str = ""

    def __new__(cls, *args: Any, **kwargs: Any) -> "Params":
        valid = cls.param_names()
        bad = set(kwargs) - set(valid)
        if bad and not cls._accepts_var_keyword():
            raise UnknownParameterError(unknown_parameter_message(cls.name, bad, valid))
        return super().__new__(cls)

    def __init__(self, **params: Any) -> None:
        """Store the validated arguments of a subclass ``__init__`` as attributes."""
        for k, v in params.items():
            setattr(self, k, v)

    # -- introspection --------------------------------------------------------------------------
    @classmethod
    def param_names(cls) -> list[str]:
        """Names of the ``__init__`` parameters, in signature order (``*args``/``**kwargs`` excluded)."""
        init = cls.__init__
        if init is Params.__init__:
            return []
        names = _PARAM_NAMES.get(init)   # a signature does not change; reading it costs ~0.3 ms
        if names is None:
            sig = inspect.signature(init)
            names = _PARAM_NAMES[init] = tuple(p.name for p in list(sig.parameters.values())[1:]
                                               if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY))
        return list(names)

    @classmethod
    def _accepts_var_keyword(cls) -> bool:
        if cls.__init__ is Params.__init__:
            return False
        return any(p.kind is p.VAR_KEYWORD for p in inspect.signature(cls.__init__).parameters.values())

    # -- parameters -----------------------------------------------------------------------------
    def get_params(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in self.param_names()}

    def set_params(self, **params: Any) -> "Params":
        valid = self.param_names()
        bad = set(params) - set(valid)
        if bad:
            raise UnknownParameterError(unknown_parameter_message(self.label, bad, valid))
        for k, v in params.items():
            setattr(self, k, v)
        return self

    @property
    def label(self) -> str:
        """The registered name this object was created under (or the class's ``name``)."""
        return self.registry_name or self.name
