"""Preparing a defense: construct it from a spec, fit it on the snapshot, calibrate it on clean data.

This is the only place a defense is prepared (evaluation runner, ``sieve calibrate``, the
dashboard, the HTTP service and the tests all call :func:`prepare_defense`):

1. :func:`build_defense` — a registered name or an ``a+b`` serial spec, with parameters taken from
   a calibration mapping (``{name: {param: value}}``) under explicit ``params``; unknown parameter
   names are errors (the defense's ``set_params`` contract).
2. ``fit`` — corpus-time detectors (RSG) are fitted on the snapshot being defended.
3. :func:`calibrate_defense` — a defense whose threshold is unset learns it on clean rankings only,
   so that at most ``clean_budget`` of the clean documents it scores would be removed
   (docs/algorithms.md §9.2; one budget rule, :mod:`sieve.defenses.budget`).
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Mapping, Sequence

from sieve.constants import CLEAN, CLEAN_BUDGET, K_CTX

if TYPE_CHECKING:
    from sieve.defenses.base import Defense
    from sieve.experiment.snapshots import Experiment, Snapshot
    from sieve.resources import Resources
    from sieve.types import Ranking


class DefenseSpecError(ValueError):
    """An unknown defense name, a bad serial spec or an unknown parameter (message names them)."""


def build_defense(spec: str, params: Mapping[str, Any] | None = None,
                  calibration: Mapping[str, Mapping[str, Any]] | None = None) -> "Defense":
    """A defense by registered name or ``a+b`` serial spec. Parameters: ``calibration[spec]``
    (learned thresholds) overridden by ``params``."""
    from sieve.defenses.pipeline import build_defense as _build

    merged = {**dict((calibration or {}).get(spec) or {}), **dict(params or {})}
    try:
        d = _build(spec, **merged)
    except KeyError as e:
        raise DefenseSpecError(str(e.args[0]) if e.args else str(e)) from None
    except (TypeError, ValueError) as e:
        raise DefenseSpecError(str(e)) from None
    if not getattr(d, "registry_name", ""):
        d.registry_name = spec
    return d


def min_documents(defense: "Defense") -> int | None:
    """Retrieved documents per query the defense needs to decide at all (class attribute
    ``min_documents``; for a serial spec, the largest of its stages). ``None`` = no minimum."""
    stages = getattr(defense, "stages", None) or [defense]
    needs = [int(n) for s in stages if (n := getattr(s, "min_documents", None))]
    return max(needs) if needs else None


def check_depth(defense: "Defense", depth: int) -> None:
    """Refuse a retrieval depth at which ``defense`` could not decide anything (every decision would
    be ``unavailable`` and its table row would look like ``none``)."""
    need = min_documents(defense)
    if need is not None and int(depth) < need:
        raise DefenseSpecError(f"{defense.label} needs at least {need} retrieved documents per query; "
                               f"depth {depth} is too shallow (use a depth >= {need})")


def fit_defense(experiment: "Experiment", defense: "Defense", snapshot: "Snapshot | None" = None,
                condition: str = CLEAN) -> "Defense":
    """Fit a corpus-time detector (RSG) on the snapshot it defends; query-time defenses are returned as is."""
    if defense.corpus_time:
        snap = snapshot if snapshot is not None else experiment.snapshot(condition)
        defense.fit(snap.index, experiment.resources)
    return defense


def needs_calibration(defense: "Defense") -> bool:
    """True when the defense has a threshold parameter that is still unset."""
    p = defense.threshold_param
    return p is not None and getattr(defense, p, None) is None


def calibrate_defense(defense: "Defense", clean_rankings: Sequence["Ranking"], resources: "Resources",
                      clean_budget: float = CLEAN_BUDGET, k_ctx: int | None = K_CTX) -> dict[str, Any]:
    """Learn ``defense``'s threshold on clean rankings (never attack data). Returns the changed
    parameters ``{param: value}``. Rankings of any other condition are refused."""
    bad = sorted({r.condition for r in clean_rankings if r.condition != CLEAN})
    if bad:
        raise ValueError(f"{defense.label}: calibration takes clean rankings only; got condition(s) {', '.join(bad)}")
    if not 0.0 <= float(clean_budget) < 1.0:
        raise ValueError(f"clean budget must be in [0, 1), got {clean_budget}")
    before = dict(defense.get_params())
    defense.calibrate(list(clean_rankings), resources, clean_budget, k_ctx=k_ctx)
    after = defense.get_params()
    changed = {k: v for k, v in after.items() if _plain(v) != _plain(before.get(k))}
    if not changed and defense.threshold_param is not None:
        changed = {defense.threshold_param: getattr(defense, defense.threshold_param)}
    return {k: _plain(v) for k, v in changed.items()}


def prepare_defense(experiment: "Experiment", spec: "str | Defense", *, snapshot: "Snapshot | None" = None,
                    condition: str = CLEAN, params: Mapping[str, Any] | None = None,
                    calibration: Mapping[str, Mapping[str, Any]] | None = None,
                    clean_budget: float = CLEAN_BUDGET, clean_rankings: Sequence["Ranking"] | None = None,
                    clean_limit: int | None = None, k_ctx: int | None = K_CTX) -> "Defense":
    """Build ``spec`` (or take a constructed defense), fit corpus-time detectors on the snapshot of
    ``condition`` (or ``snapshot``), and calibrate an unset threshold on clean rankings
    (``clean_rankings``, else the experiment's first ``clean_limit`` clean queries). A defense that
    cannot run at the experiment's depth (:func:`check_depth`) raises :class:`DefenseSpecError`."""
    d = build_defense(spec, params, calibration) if isinstance(spec, str) else spec
    check_depth(d, experiment.depth)
    fit_defense(experiment, d, snapshot, condition)
    if needs_calibration(d):
        rankings = list(clean_rankings) if clean_rankings is not None else experiment.clean_rankings(clean_limit)
        if not rankings:
            raise ValueError(f"{d.label}: the dataset has no clean queries to calibrate its threshold on; "
                             f"give the threshold ({d.threshold_param}) explicitly or add queries.jsonl")
        if d.corpus_time and condition != CLEAN:
            # corpus-time detectors calibrate on the clean snapshot, then defend the condition's
            fit_defense(experiment, d, experiment.snapshot(CLEAN))
            calibrate_defense(d, rankings, experiment.resources, clean_budget, k_ctx)
            fit_defense(experiment, d, snapshot, condition)
        else:
            calibrate_defense(d, rankings, experiment.resources, clean_budget, k_ctx)
    return d


def _plain(v: Any) -> Any:
    if hasattr(v, "item"):
        return v.item()
    return v
