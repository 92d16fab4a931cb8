"""Name → recipe registries read by the CLI, the evaluation runner and the dashboard.

Defenses and attacks register themselves at import of their module with a bare class decorator
(``@DEFENSES.register``); all metadata lives on the class (garak's plugin discipline): ``name``,
``summary``, ``paper``, ``needs`` and ``presets``. A preset is another registered name for the same
class with fixed parameters (e.g. ``tris_l1`` is :class:`~sieve.defenses.tris.TRIS` with L2 and L3
switched off); it may override ``summary``, ``paper`` and ``needs`` for that name.

Modules are discovered, not listed: the first lookup imports every module of the ``sieve.defenses``
(resp. ``sieve.attacks``) package, so a new module registers itself by existing. This module imports
neither package at import time (no import cycle: a defense module imports ``sieve.registry``).

Third-party plugins come next, from the entry-point groups ``sieve.defenses`` and ``sieve.attacks``
(:func:`importlib.metadata.entry_points`). An entry point names a module (whose classes register
themselves with the decorator) or a class (registered here if it is not yet). Every entry records
the distribution that provided it (built-ins: ``sieve-rag``). A plugin that fails to load — import
error, bad metadata, a name already taken — is skipped whole (nothing it registered stays) and
reported: one warning line on the ``sieve.registry`` logger and a :class:`PluginProblem` in
:meth:`Registry.problems`. Built-ins load first and cannot be replaced.

Registered names are a public contract: never rename or drop one.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass, field, replace
from typing import Any, Callable

from sieve.params import UnknownParameterError, unknown_parameter_message

#: Model roles a recipe can need — the attributes of :class:`sieve.resources.Resources`
#: (``causal_lm`` is ``Resources.lm``; ``judge`` the judge embedder).
RESOURCE_ROLES: tuple[str, ...] = ("retriever", "judge", "causal_lm", "token_encoder", "llm")

#: The distribution of the built-in recipes.
BUILTIN_DISTRIBUTION = "sieve-rag"

log = logging.getLogger("sieve.registry")


def _builtin_version() -> str:
    try:
        from importlib.metadata import version

        return version(BUILTIN_DISTRIBUTION)
    except Exception:  # noqa: BLE001 - a source checkout that is not installed
        return ""


@dataclass(frozen=True)
class Entry:
    name: str
    factory: Callable[..., Any]
    preset: dict[str, Any] = field(default_factory=dict)
    summary: str = ""
    paper: str = ""
    needs: tuple[str, ...] = ()  # RESOURCE_ROLES names
    distribution: str = BUILTIN_DISTRIBUTION  # the package that provides it
    version: str = ""

    @property
    def builtin(self) -> bool:
        return self.distribution == BUILTIN_DISTRIBUTION

    @property
    def provider(self) -> str:
        """``"my-plugin 0.1"`` (distribution and version)."""
        return f"{self.distribution} {self.version}".strip()

    def param_names(self) -> list[str]:
        names = getattr(self.factory, "param_names", None)
        return list(names()) if callable(names) else []

    def create(self, **params: Any) -> Any:
        """A new instance with the preset's parameters overridden by ``params``; an unknown
        parameter name raises :class:`ValueError` naming this entry, the key and the valid names."""
        valid = self.param_names()
        bad = set(params) - set(valid)
        nested = {k: params[k] for k in bad} if getattr(self.factory, "nested_params", False) else {}
        if bad and not nested:
            raise UnknownParameterError(unknown_parameter_message(self.name, bad, valid))
        obj = self.factory(**{**self.preset, **{k: v for k, v in params.items() if k not in nested}})
        if nested:   # a composition's stage__param names (sieve.defenses.pipeline.Serial)
            obj.registry_name = self.name
            obj.set_params(**nested)
        try:
            obj.registry_name = self.name
        except AttributeError:  # pragma: no cover - frozen objects
            pass
        return obj


@dataclass(frozen=True)
class PluginProblem:
    """A plugin entry point that was skipped (or loaded nothing), and why."""

    group: str
    entry_point: str       # "name = value" as declared
    distribution: str      # "my-plugin 0.1"
    error: str             # "ModuleNotFoundError: No module named 'x'"

    @property
    def message(self) -> str:
        return f"{self.group} plugin {self.entry_point!r} ({self.distribution}) skipped: {self.error}"


class NameClashError(ValueError):
    """A registered name taken by another class; the message names both packages."""


def _check_metadata(kind: str, name: str, summary: str, paper: str, needs: tuple[str, ...]) -> None:
    if not name or not summary or not paper:
        raise ValueError(f"{kind} {name!r}: name, summary and paper must be non-empty")
    bad = [n for n in needs if n not in RESOURCE_ROLES]
    if bad:
        raise ValueError(f"{kind} {name!r}: unknown needs {bad}; use {', '.join(RESOURCE_ROLES)}")


def _error_text(e: BaseException) -> str:
    return " ".join(f"{type(e).__name__}: {e}".split())


class Registry:
    def __init__(self, kind: str, package: str, group: str | None = None):
        self.kind = kind
        self.package = package
        self.group = group if group is not None else package   # entry-point group of plugins
        self._entries: dict[str, Entry] = {}
        self._problems: list[PluginProblem] = []
        self._loaded = False
        self._provider: tuple[str, str] | None = None   # (distribution, version) while loading a plugin
        self._log_problems = True

    # -- registration ---------------------------------------------------------------------------
    def _provider_of(self, cls: type) -> tuple[str, str]:
        if self._provider is not None:
            return self._provider
        module = getattr(cls, "__module__", "") or ""
        if module == "sieve" or module.startswith("sieve."):
            return BUILTIN_DISTRIBUTION, _builtin_version()
        return module.split(".")[0] or "unknown", ""   # imported by hand, not through an entry point

    def register(self, cls: Any) -> Any:
        """Class decorator: register ``cls`` under ``cls.name`` and each name of ``cls.presets``.
        A name already taken by another class raises :class:`NameClashError` naming both packages;
        nothing of ``cls`` is registered then."""
        dist, version = self._provider_of(cls)
        items = [(cls.name, {})] + list(getattr(cls, "presets", {}).items())
        new: list[Entry] = []
        for name, spec in items:
            unknown = set(spec) - {"params", "summary", "paper", "needs"}
            if unknown:
                raise ValueError(f"{self.kind} preset {name!r}: unknown keys {sorted(unknown)}")
            entry = Entry(name=name, factory=cls, preset=dict(spec.get("params", {})),
                          summary=spec.get("summary", cls.summary), paper=spec.get("paper", cls.paper),
                          needs=tuple(spec.get("needs", cls.needs)), distribution=dist, version=version)
            _check_metadata(self.kind, entry.name, entry.summary, entry.paper, entry.needs)
            bad = set(entry.preset) - set(entry.param_names())
            if bad:
                raise UnknownParameterError(unknown_parameter_message(f"preset {name}", bad, entry.param_names()))
            old = self._entries.get(name)
            if old is not None and old.factory is not cls:
                if entry.builtin and not old.builtin:   # a plugin imported by hand before the built-ins
                    self._evict(old, NameClashError(self._clash_message(entry, old)))
                else:
                    raise NameClashError(self._clash_message(old, entry))
            if old is not None and old.factory is cls:
                entry = old
            new.append(entry)
        for entry in new:
            self._entries[entry.name] = entry
        return cls

    def _clash_message(self, old: Entry, new: Entry) -> str:
        msg = (f"{self.kind} name {new.name!r} of {new.provider} ({new.factory.__module__}.{new.factory.__qualname__}) "
               f"is already registered by {old.provider} ({old.factory.__module__}.{old.factory.__qualname__})")
        if old.builtin:
            msg += "; built-in names are a public contract and cannot be replaced"
        return msg

    def _evict(self, plugin: Entry, error: Exception) -> None:
        for n in [n for n, e in self._entries.items() if e.factory is plugin.factory]:
            del self._entries[n]
        self._report(PluginProblem(self.group, plugin.factory.__module__, plugin.provider, _error_text(error)))

    def _report(self, problem: PluginProblem) -> None:
        self._problems.append(problem)
        if self._log_problems:
            log.warning("warning: %s", problem.message)

    # -- discovery ------------------------------------------------------------------------------
    def modules(self) -> list[str]:
        """Every module of the package (discovered with :func:`pkgutil.iter_modules`)."""
        import importlib
        import pkgutil

        pkg = importlib.import_module(self.package)
        return sorted(f"{self.package}.{m.name}" for m in pkgutil.iter_modules(pkg.__path__)
                      if not m.name.startswith("_"))

    def entry_points(self) -> list[Any]:
        """The installed entry points of :attr:`group`, sorted by distribution and name."""
        from importlib.metadata import entry_points

        eps = list(entry_points(group=self.group))
        return sorted(eps, key=lambda ep: ((ep.dist.metadata["Name"] or "") if ep.dist else "", ep.name))

    def _load_plugin(self, ep: Any) -> None:
        import inspect

        dist = ep.dist
        name = (dist.metadata["Name"] or "unknown") if dist is not None else "unknown"
        version = (dist.version or "") if dist is not None else ""
        label = f"{ep.name} = {ep.value}"
        before = dict(self._entries)
        self._provider = (name, version)
        try:
            obj = ep.load()
            if inspect.isclass(obj):
                if not any(e.factory is obj for e in self._entries.values()):
                    self.register(obj)
                owned = [n for n, e in self._entries.items() if e.factory is obj]
            elif inspect.ismodule(obj):
                mod = obj.__name__
                owned = [n for n, e in self._entries.items()
                         if e.factory.__module__ == mod or e.factory.__module__.startswith(mod + ".")]
            else:
                raise TypeError(f"entry point resolves to {type(obj).__name__}, expected a module or a class")
            if not owned:
                raise LookupError(f"it registered no {self.kind}")
            for n in owned:   # a plugin module imported by hand earlier registered without its distribution
                if not self._entries[n].builtin:
                    self._entries[n] = replace(self._entries[n], distribution=name, version=version)
        except Exception as e:  # noqa: BLE001 - any failure of third-party code skips that plugin
            self._entries = before
            self._report(PluginProblem(self.group, label, f"{name} {version}".strip(), _error_text(e)))
        finally:
            self._provider = None

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
            try:
                eps = self.entry_points()
            except Exception as e:  # noqa: BLE001 - broken metadata of some installed package
                self._report(PluginProblem(self.group, "*", "entry points", _error_text(e)))
                eps = []
            for ep in eps:
                self._load_plugin(ep)

    def load(self, log_problems: bool = True) -> list[PluginProblem]:
        """Import the built-ins and the plugins (once) and return the plugins skipped. Each is logged
        as one warning line on the ``sieve.registry`` logger, unless ``log_problems`` is false
        (a caller that shows them itself, like ``sieve list``)."""
        self._log_problems = log_problems
        try:
            self._load()
        finally:
            self._log_problems = True
        return list(self._problems)

    def problems(self) -> list[PluginProblem]:
        """Plugins skipped while loading (each also logged once as a warning)."""
        self._load()
        return list(self._problems)

    def names(self) -> list[str]:
        self._load()
        return list(self._entries)

    def entry(self, name: str) -> Entry:
        self._load()
        if name not in self._entries:
            known = ", ".join(sorted(self._entries))
            msg = f"unknown {self.kind} {name!r}; registered {self.kind}s: {known}"
            skipped = [p for p in self._problems if p.entry_point.split(" = ")[0] == name]
            if skipped:
                msg += "; " + "; ".join(p.message for p in skipped)
            raise KeyError(msg)
        return self._entries[name]

    def create(self, name: str, **params: Any) -> Any:
        return self.entry(name).create(**params)

    def entries(self) -> list[Entry]:
        self._load()
        return list(self._entries.values())


DEFENSES = Registry("defense", "sieve.defenses")
ATTACKS = Registry("attack", "sieve.attacks")
