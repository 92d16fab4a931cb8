"""Name → recipe registries read by the CLI, the evaluation runner and the dashboard.

Defenses and attacks register themselves once, at import of their module, with class-level
metadata (garak's plugin discipline). A registered *name* may be a preset of a class (e.g.
``tris_l1`` is :class:`~sieve.defenses.tris.TRIS` with L2 and L3 switched off). Registered names
are a public contract: never rename or drop one.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable


@dataclass(frozen=True)
class Entry:
    name: str
    factory: Callable[..., Any]
    preset: dict[str, Any] = field(default_factory=dict)
    summary: str = ""
    paper: str = ""
    needs: tuple[str, ...] = ()  # any of: "retriever", "embedder", "lm", "token_encoder", "llm"

    def create(self, **params: Any) -> Any:
        merged = {**self.preset, **params}
        obj = self.factory(**merged)
        try:
            obj.registry_name = self.name
        except AttributeError:  # pragma: no cover - frozen objects
            pass
        return obj


class Registry:
    def __init__(self, kind: str, modules: tuple[str, ...]):
        self.kind = kind
        self._modules = modules
        self._entries: dict[str, Entry] = {}
        self._loaded = False

    def register(self, name: str, factory: Callable[..., Any] | None = None, *, preset: dict[str, Any] | None = None,
                 summary: str = "", paper: str = "", needs: tuple[str, ...] | None = None):
        """Register ``factory`` under ``name``; usable as a class decorator."""

        def deco(f: Callable[..., Any]) -> Callable[..., Any]:
            if name in self._entries and self._entries[name].factory is not f:
                raise ValueError(f"{self.kind} name {name!r} is already registered")
            self._entries[name] = Entry(
                name=name,
                factory=f,
                preset=dict(preset or {}),
                summary=summary or (f.__doc__ or "").strip().splitlines()[0] if (summary or f.__doc__) else "",
                paper=paper or getattr(f, "paper", ""),
                needs=tuple(needs if needs is not None else getattr(f, "needs", ())),
            )
            return f

        return deco(factory) if factory is not None else deco

    def _load(self) -> None:
        if not self._loaded:
            import importlib

            self._loaded = True
            for m in self._modules:
                try:
                    importlib.import_module(m)
                except ModuleNotFoundError as e:  # a listed module not written yet; tests/test_registry.py forbids this
                    if e.name != m:
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


DEFENSES = Registry(
    "defense",
    (
        "sieve.defenses.none",
        "sieve.defenses.tris",
        "sieve.defenses.trustrag",
        "sieve.defenses.robustrag",
        "sieve.defenses.perplexity",
        "sieve.defenses.rsq",
        "sieve.defenses.rsg",
        "sieve.defenses.serial",
    ),
)
ATTACKS = Registry(
    "attack",
    (
        "sieve.attacks.blackbox",
        "sieve.attacks.hotflip",
        "sieve.attacks.paraphrase",
        "sieve.attacks.script_trigger",
        "sieve.attacks.placement",
    ),
)
