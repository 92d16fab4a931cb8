"""Name → recipe registries read by the CLI, the evaluation runner and the dashboard.

Defenses and attacks register themselves at import of their module with a bare class decorator
(``@DEFENSES.register``); all metadata lives on the class (garak's plugin discipline): ``name``,
``summary``, ``paper``, ``needs`` and ``presets``. A preset is another registered name for the same
class with fixed parameters (e.g. ``tris_l1`` is :class:`~sieve.defenses.tris.TRIS` with L2 and L3
switched off); it may override ``summary``, ``paper`` and ``needs`` for that name.

Modules are discovered, not listed: the first lookup imports every module of the ``sieve.defenses``
(resp. ``sieve.attacks``) package, so a new module registers itself by existing. This module imports
neither package at import time (no import cycle: a defense module imports ``sieve.registry``).

Registered names are a public contract: never rename or drop one.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

from sieve.params import UnknownParameterError, unknown_parameter_message

#: Model roles a recipe can need — the attributes of :class:`sieve.resources.Resources`
#: (``causal_lm`` is ``Resources.lm``; ``judge`` the judge embedder).
RESOURCE_ROLES: tuple[str, ...] = ("retriever", "judge", "causal_lm", "token_encoder", "llm")


@dataclass(frozen=True)
class Entry:
    name: str
    factory: Callable[..., Any]
    preset: dict[str, Any] = field(default_factory=dict)
    summary: str = ""
    paper: str = ""
    needs: tuple[str, ...] = ()  # RESOURCE_ROLES names

    def param_names(self) -> list[str]:
        names = getattr(self.factory, "param_names", None)
        return list(names()) if callable(names) else []

    def create(self, **params: Any) -> Any:
        """A new instance with the preset's parameters overridden by ``params``; an unknown
        parameter name raises :class:`ValueError` naming this entry, the key and the valid names."""
        valid = self.param_names()
        bad = set(params) - set(valid)
        if bad:
            raise UnknownParameterError(unknown_parameter_message(self.name, bad, valid))
        obj = self.factory(**{**self.preset, **params})
        try:
            obj.registry_name = self.name
        except AttributeError:  # pragma: no cover - frozen objects
            pass
        return obj


def _check_metadata(kind: str, name: str, summary: str, paper: str, needs: tuple[str, ...]) -> None:
    if not name or not summary or not paper:
        raise ValueError(f"{kind} {name!r}: name, summary and paper must be non-empty")
    bad = [n for n in needs if n not in RESOURCE_ROLES]
    if bad:
        raise ValueError(f"{kind} {name!r}: unknown needs {bad}; use {', '.join(RESOURCE_ROLES)}")


class Registry:
    def __init__(self, kind: str, package: str):
        self.kind = kind
        self.package = package
        self._entries: dict[str, Entry] = {}
        self._loaded = False

    def register(self, cls: type) -> type:
        """Class decorator: register ``cls`` under ``cls.name`` and each name of ``cls.presets``."""
        items = [(cls.name, {})] + list(getattr(cls, "presets", {}).items())
        for name, spec in items:
            unknown = set(spec) - {"params", "summary", "paper", "needs"}
            if unknown:
                raise ValueError(f"{self.kind} preset {name!r}: unknown keys {sorted(unknown)}")
            entry = Entry(name=name, factory=cls, preset=dict(spec.get("params", {})),
                          summary=spec.get("summary", cls.summary), paper=spec.get("paper", cls.paper),
                          needs=tuple(spec.get("needs", cls.needs)))
            _check_metadata(self.kind, entry.name, entry.summary, entry.paper, entry.needs)
            bad = set(entry.preset) - set(entry.param_names())
            if bad:
                raise UnknownParameterError(unknown_parameter_message(f"preset {name}", bad, entry.param_names()))
            old = self._entries.get(name)
            if old is not None and old.factory is not cls:
                raise ValueError(f"{self.kind} name {name!r} is already registered")
            self._entries[name] = entry
        return cls

    def modules(self) -> list[str]:
        """Every module of the package (discovered with :func:`pkgutil.iter_modules`)."""
        import importlib
        import pkgutil

        pkg = importlib.import_module(self.package)
        return sorted(f"{self.package}.{m.name}" for m in pkgutil.iter_modules(pkg.__path__)
                      if not m.name.startswith("_"))

    def _load(self) -> None:
        if not self._loaded:
            import importlib

            self._loaded = True
            try:
                for m in self.modules():
                    importlib.import_module(m)
            except BaseException:
                self._loaded = False
                raise

    def names(self) -> list[str]:
        self._load()
        return list(self._entries)

    def entry(self, name: str) -> Entry:
        self._load()
        if name not in self._entries:
            known = ", ".join(sorted(self._entries))
            raise KeyError(f"unknown {self.kind} {name!r}; registered {self.kind}s: {known}")
        return self._entries[name]

    def create(self, name: str, **params: Any) -> Any:
        return self.entry(name).create(**params)

    def entries(self) -> list[Entry]:
        self._load()
        return list(self._entries.values())


DEFENSES = Registry("defense", "sieve.defenses")
ATTACKS = Registry("attack", "sieve.attacks")
