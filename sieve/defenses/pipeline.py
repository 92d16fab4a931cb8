"""Serial composition of defenses: ``A+B`` = A on the ranking, then B on A's survivors.

docs/algorithms.md §5 (serial deployment): B sees a ranking of A's survivors with ranks renumbered
1.. (:meth:`Ranking.without`); each document's decision is the first removal (A's if A removed it,
else B's); documents B never saw keep A's decision. Every stage is inspected with the real
generation context size ``k_ctx`` (so TRIS L3 inside ``tris+perplexity`` verifies only the documents
that would reach the generator from its input). The context is built by
:meth:`sieve.defenses.base.Defense.apply`: refill to ``k_ctx`` from the saved original ranking
without rescoring, with the usual everything-filtered fallback.

:func:`build_defense` turns a spec such as ``"tris+perplexity"`` into a :class:`Serial`; the CLI,
the evaluation runner and the dashboard call it.
"""
from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any, Mapping, Sequence

from sieve.constants import CLEAN_BUDGET, K_CTX
from sieve.defenses.base import Defense, copy_decision
from sieve.params import UnknownParameterError, unknown_parameter_message
from sieve.registry import DEFENSES
from sieve.types import Decision, Inspection, Ranking

if TYPE_CHECKING:
    from sieve.resources import Resources


class Serial(Defense):
    """Stages applied in order, each on the survivors of the previous ones.

    Parameters are addressed as ``"<stage label>.<param>"`` (e.g. ``"perplexity.threshold"``) in
    :meth:`get_params` / :meth:`set_params`; an unprefixed name goes to every stage that has it; any
    other name raises :class:`ValueError`. ``threshold_param`` is the dotted name of the first stage
    threshold that still needs learning (else of the first stage with a threshold); :meth:`calibrate`
    calibrates every stage that has a threshold, in order, each on the clean rankings it would see in
    the pipeline. Threshold knobs (:meth:`redecide`) are the stages' knobs, dotted the same way.
    The answer (``Inspection.answer``) is the last stage's, when that stage answers.
    """

    name = "serial"
    summary = "Serial composition: each stage runs on the survivors of the previous ones."
    paper = "serial composition (docs/algorithms.md §5)"

    def __init__(self, defenses: Sequence[Defense] = ()) -> None:
        stages = list(defenses)
        if not stages:
            raise ValueError("serial: give at least one defense")
        labels = [s.label for s in stages]
        if len(set(labels)) != len(labels):
            raise ValueError(f"serial: each stage must appear once; got {'+'.join(labels)}")
        self.stages = stages
        self.registry_name = "+".join(labels)
        self.needs = tuple(dict.fromkeys(n for s in stages for n in s.needs))  # type: ignore[misc]
        self.corpus_time = any(s.corpus_time for s in stages)  # type: ignore[misc]
        self.answers = stages[-1].answers  # type: ignore[misc]
        self.paper = " → ".join(s.paper or s.label for s in stages)  # type: ignore[misc]
        self.summary = " → ".join(s.label for s in stages)  # type: ignore[misc]
        pending = [s for s in stages if s.threshold_param and getattr(s, s.threshold_param, None) is None]
        with_thr = pending or [s for s in stages if s.threshold_param]
        self.threshold_param = f"{with_thr[0].label}.{with_thr[0].threshold_param}" if with_thr else None  # type: ignore[misc]

    # -- parameters ----------------------------------------------------------------------------
    def _stage(self, label: str) -> Defense:
        for s in self.stages:
            if s.label == label:
                return s
        raise ValueError(f"serial {self.label}: no stage {label!r}; stages: {', '.join(s.label for s in self.stages)}")

    def __getattr__(self, name: str) -> Any:
        if "." in name and "stages" in self.__dict__:
            label, param = name.split(".", 1)
            try:
                return getattr(self._stage(label), param)
            except ValueError:
                pass
        raise AttributeError(name)

    def get_params(self) -> dict[str, Any]:
        return {f"{s.label}.{k}": v for s in self.stages for k, v in s.get_params().items()}

    def set_params(self, **params: Any) -> "Serial":
        valid = list(self.get_params())
        bad = [k for k in params
               if (k not in valid if "." in k else not any(k in s.get_params() for s in self.stages))]
        if bad:
            raise UnknownParameterError(unknown_parameter_message(self.label, set(bad), valid))
        for key, value in params.items():
            if "." in key:
                label, param = key.split(".", 1)
                self._stage(label).set_params(**{param: value})
                continue
            for s in self.stages:
                if key in s.get_params():
                    s.set_params(**{key: value})
        return self

    # -- fitting -------------------------------------------------------------------------------
    def fit(self, snapshot: Any, resources: "Resources") -> "Serial":
        for s in self.stages:
            if s.corpus_time:
                s.fit(snapshot, resources)
        return self

    def calibrate(self, clean_rankings: list[Ranking], resources: "Resources",
                  clean_budget: float = CLEAN_BUDGET, k_ctx: int | None = K_CTX) -> "Serial":
        current = list(clean_rankings)
        for s in self.stages:
            if s.threshold_param:
                s.calibrate(current, resources, clean_budget, k_ctx)
            if s is not self.stages[-1]:
                current = [r.without(set(s.inspect(r, resources, k_ctx).removed_ids)) for r in current]
        if self.threshold_param:
            self.threshold_ = getattr(self, self.threshold_param)
        return self

    # -- protocol ------------------------------------------------------------------------------
    def inspect(self, ranking: Ranking, resources: "Resources", k_ctx: int | None = K_CTX) -> Inspection:
        by_id: dict[str, Decision] = {}
        out = Inspection([], {"stages": [s.label for s in self.stages]})
        current = ranking
        for s in self.stages:
            if not current.documents:
                out.info.setdefault("skipped_stages", []).append(s.label)
                continue
            t = time.perf_counter()
            r = s.inspect(current, resources, k_ctx)
            for d in r.decisions:
                d.evidence.setdefault("stage", s.label)
                by_id[d.doc_id] = d   # survivors of earlier stages: the later stage's decision
            out.layers_run += [f"{s.label}:{x}" for x in (r.layers_run or [s.label])]
            out.latency_ms.update({f"{s.label}:{k}": v for k, v in r.latency_ms.items()})
            out.latency_ms[f"{s.label}:total"] = (time.perf_counter() - t) * 1000
            out.info[s.label] = r.info
            out.warnings += r.warnings
            if s is self.stages[-1] and s.answers:
                out.answer = r.answer
            current = current.without(set(r.removed_ids))
        out.decisions = [by_id[d.id] for d in ranking.documents]
        return out

    # -- re-deciding ---------------------------------------------------------------------------
    def current_thresholds(self) -> dict[str, float | None]:
        return {f"{s.label}.{k}": v for s in self.stages for k, v in s.current_thresholds().items()}

    def redecide(self, decisions: list[Decision], thresholds: Mapping[str, float]) -> list[Decision]:
        """Each decision is re-decided by the stage that made it (``evidence["stage"]``) with the
        undotted keys plus that stage's dotted keys (``"<stage>.<key>"``, which win). A document an
        earlier stage no longer removes was never seen by the later stages and is kept (fail-open),
        as for TRIS L3."""
        plain = {k: v for k, v in thresholds.items() if "." not in k}
        out = []
        for d in decisions:
            label = d.evidence.get("stage")
            sub = {**plain, **{k.split(".", 1)[1]: v for k, v in thresholds.items()
                               if "." in k and k.split(".", 1)[0] == label}}
            stage = next((s for s in self.stages if s.label == label), None)
            out.append(stage.redecide([d], sub)[0] if stage is not None and sub else copy_decision(d))
        return out


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
