"""Serial composition of defenses: ``A+B`` = A on the ranking, then B on A's survivors.

ALGORITHMS.md §5 (serial deployment): B sees a ranking of A's survivors with ranks renumbered 1..
(:meth:`Ranking.without`); each document's decision is the first removal (A's if A removed it,
else B's); documents B never saw keep A's decision. The context is refilled to ``k_ctx`` from the
saved original ranking without rescoring, with the usual everything-filtered fallback
(:func:`sieve.defenses.base.finalize_context`).

:func:`build_defense` turns a spec such as ``"tris+perplexity"`` into a :class:`Serial`; the CLI,
the evaluation runner and the dashboard call it.
"""
from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any, Sequence

from sieve.defenses.base import Defense, finalize_context
from sieve.registry import DEFENSES
from sieve.types import Decision, DefenseResult, Ranking

if TYPE_CHECKING:
    from sieve.resources import Resources


class Serial(Defense):
    """Stages applied in order, each on the survivors of the previous ones.

    Parameters are addressed as ``"<stage label>.<param>"`` (e.g. ``"perplexity.threshold"``) in
    :meth:`get_params` / :meth:`set_params`; an unprefixed name goes to every stage that has it.
    ``threshold_param`` is the dotted name of the first stage threshold that still needs learning
    (else of the first stage with a threshold); :meth:`calibrate` calibrates every stage that has a
    threshold, in order, each on the clean rankings it would see in the pipeline.
    """

    name = "serial"
    paper = "serial composition (ALGORITHMS.md §5)"

    def __init__(self, defenses: Sequence[Defense] = ()) -> None:
        stages = list(defenses)
        if not stages:
            raise ValueError("serial: give at least one defense")
        labels = [s.label for s in stages]
        if len(set(labels)) != len(labels):
            raise ValueError(f"serial: each stage must appear once; got {'+'.join(labels)}")
        self._params = {}
        self.stages = stages
        self.registry_name = "+".join(labels)
        self.needs = tuple(dict.fromkeys(n for s in stages for n in s.needs))  # type: ignore[misc]
        self.corpus_time = any(s.corpus_time for s in stages)  # type: ignore[misc]
        self.paper = " → ".join(s.paper or s.label for s in stages)  # type: ignore[misc]
        pending = [s for s in stages if s.threshold_param and getattr(s, s.threshold_param, None) is None]
        with_thr = pending or [s for s in stages if s.threshold_param]
        self.threshold_param = f"{with_thr[0].label}.{with_thr[0].threshold_param}" if with_thr else None  # type: ignore[misc]

    # -- parameters ----------------------------------------------------------------------------
    def _stage(self, label: str) -> Defense:
        for s in self.stages:
            if s.label == label:
                return s
        raise KeyError(f"serial {self.label}: no stage {label!r}")

    def __getattr__(self, name: str) -> Any:
        if "." in name and "stages" in self.__dict__:
            label, param = name.split(".", 1)
            try:
                return getattr(self._stage(label), param)
            except KeyError:
                pass
        raise AttributeError(name)

    def get_params(self) -> dict[str, Any]:
        return {f"{s.label}.{k}": v for s in self.stages for k, v in s.get_params().items()}

    def set_params(self, **params: Any) -> "Serial":
        for key, value in params.items():
            if "." in key:
                label, param = key.split(".", 1)
                self._stage(label).set_params(**{param: value})
                continue
            targets = [s for s in self.stages if key in s.get_params()]
            if not targets:
                raise ValueError(f"serial {self.label}: no stage has a parameter {key!r}")
            for s in targets:
                s.set_params(**{key: value})
        return self

    # -- fitting -------------------------------------------------------------------------------
    def fit(self, snapshot: Any, resources: "Resources") -> "Serial":
        for s in self.stages:
            if s.corpus_time:
                s.fit(snapshot, resources)
        return self

    def calibrate(self, clean_rankings: list[Ranking], resources: "Resources",
                  clean_budget: float = 0.05) -> "Serial":
        current = list(clean_rankings)
        for s in self.stages:
            if s.threshold_param:
                s.calibrate(current, resources, clean_budget)
            if s is not self.stages[-1]:
                current = [r.without(set(s.apply(r, resources, k_ctx=None).removed_ids)) for r in current]
        if self.threshold_param:
            self.threshold_ = getattr(self, self.threshold_param)
        return self

    # -- protocol ------------------------------------------------------------------------------
    def inspect(self, ranking: Ranking, resources: "Resources") -> list[Decision]:
        return self.apply(ranking, resources, k_ctx=None).decisions

    def apply(self, ranking: Ranking, resources: "Resources", k_ctx: int | None = 5) -> DefenseResult:
        t0 = time.perf_counter()
        by_id: dict[str, Decision] = {}
        layers: list[str] = []
        latency: dict[str, float] = {}
        info: dict[str, Any] = {"stages": [s.label for s in self.stages]}
        warnings: list[str] = []
        current = ranking
        for s in self.stages:
            if not current.documents:
                info.setdefault("skipped_stages", []).append(s.label)
                continue
            r = s.apply(current, resources, k_ctx=None)
            for d in r.decisions:
                d.evidence.setdefault("stage", s.label)
                by_id[d.doc_id] = d   # survivors of earlier stages: the later stage's decision
            layers += [f"{s.label}:{x}" for x in (r.layers_run or [s.label])]
            latency.update({f"{s.label}:{k}": v for k, v in r.latency_ms.items()})
            info[s.label] = r.info
            warnings += [w for w in r.warnings if not r.fallback_used or "falling back" not in w]
            current = current.without(set(r.removed_ids))
        decisions = [by_id[d.id] for d in ranking.documents]
        latency["total"] = (time.perf_counter() - t0) * 1000
        result = finalize_context(self.label, ranking, decisions, k_ctx, layers_run=layers, latency_ms=latency,
                                  info=info)
        result.warnings = warnings + result.warnings
        return result


def build_defense(spec: str, **params: Any) -> Defense:
    """``"name"`` → the registered defense; ``"a+b[+c]"`` → :class:`Serial` of registered defenses.

    For a serial spec, parameters are ``"<stage>.<param>"`` (or an unprefixed name shared by stages),
    e.g. ``build_defense("tris+perplexity", **{"perplexity.threshold": 40.0})``.
    """
    names = [n.strip() for n in spec.split("+")]
    if not spec.strip() or any(not n for n in names):
        raise ValueError(f"bad defense spec {spec!r}: use a registered name or names joined by '+'")
    if len(names) == 1:
        return DEFENSES.create(names[0], **params)
    serial = Serial([DEFENSES.create(n) for n in names])
    if params:
        serial.set_params(**params)
    return serial
