"""Preparing a defense: construct it from a spec, fit it on the snapshot, calibrate it on clean data.

This is the only place a defense is prepared (evaluation runner, ``sieve calibrate``, the
dashboard, the HTTP service and the tests all call :func:`prepare_defense`):

1. :func:`build_defense` — a registered name or an ``a+b`` serial spec, with parameters taken from
   a calibration mapping (``{name: {param: value}}``: a calibration file's, or the parameters an
   earlier run learned, read back on resume) under explicit ``params``; unknown parameter names
   are errors (the defense's ``set_params`` contract).
2. ``fit`` — corpus-time detectors (RSG) are fitted on the snapshot being defended.
3. :func:`calibrate_defense` — a defense that is not calibrated (``not defense.is_calibrated()``:
   its threshold, or other learned state such as fusion's nulls, is unset) learns it on clean
   rankings only, so that at most ``clean_budget`` of the clean documents it scores would be
   removed (docs/algorithms.md §9.2; one budget rule, :mod:`sieve.defenses.budget`).

A failed fit or calibration raises :class:`DefensePreparationError` (``.stage`` is ``"fit"`` or
``"calibrate"``, ``.error`` the original exception), so a caller that must go on — the runner
fails the items of that condition on a fit error and reports a calibration error in
``config.json`` — can tell them apart.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, Mapping, Sequence

from sieve.constants import CLEAN, CLEAN_BUDGET, K_CTX

if TYPE_CHECKING:
    from sieve.defenses.base import Defense
    from sieve.experiment.snapshots import Experiment, Snapshot
    from sieve.resources import Resources
    from sieve.types import Ranking

#: The stages of :func:`prepare_defense` that can fail (:attr:`DefensePreparationError.stage`).
PREPARATION_STAGES = ("fit", "calibrate")


class DefenseSpecError(ValueError):
    """An unknown defense name, a bad serial spec or an unknown parameter (message names them)."""


class DefensePreparationError(ValueError):
    """Fitting (``stage == "fit"``) or calibrating (``stage == "calibrate"``) a defense failed.

    ``error`` is the original exception (also ``__cause__``); ``defense`` the defense's label. The
    message is the original one when that was already a user-facing ``ValueError``, else it names
    the defense, the stage and the error type."""

    def __init__(self, stage: str, defense: str, error: BaseException, message: str | None = None) -> None:
        if stage not in PREPARATION_STAGES:
            raise ValueError(f"stage must be one of {', '.join(PREPARATION_STAGES)}, got {stage!r}")
        self.stage, self.defense, self.error = stage, defense, error
        if message is None:
            message = (str(error) if isinstance(error, ValueError)
                       else f"{defense}: {stage} failed: {type(error).__name__}: {error}")
        super().__init__(message)

    @property
    def detail(self) -> str:
        """``"<error type>: <message>"`` of the original error (what run files record)."""
        return f"{type(self.error).__name__}: {self.error}"


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
    """Retrieved documents per query the defense needs to decide at all: the declared attribute
    ``Defense.min_documents`` (a serial composition declares the largest of its stages').
    ``None`` = no minimum."""
    n = defense.min_documents
    return int(n) if n is not None else None


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
    """True while the defense is not calibrated: its threshold parameter, or other learned state
    (fusion's clean nulls), is unset (``Defense.is_calibrated``)."""
    return not defense.is_calibrated()


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
                    clean_limit: int | None = None, k_ctx: int | None = K_CTX, calibrate: bool = True,
                    check: bool = True, learned: dict[str, Any] | None = None) -> "Defense":
    """Build ``spec`` (or take a constructed defense), fit corpus-time detectors on the snapshot of
    ``condition`` (or ``snapshot``), and — unless ``calibrate`` is false (fit only, e.g. on an
    attacked condition) — calibrate a defense that is not calibrated on clean rankings
    (``clean_rankings``, else the experiment's first ``clean_limit`` clean queries).

    ``calibration``: ``{spec: {param: value}}`` applied when ``spec`` is built — a calibration
    file's thresholds, or what an earlier run learned (resume); a defense whose learned state is
    not a parameter (fusion's nulls) is still not calibrated then and learns it again here.
    ``learned``: a dict that receives the parameters calibration set (``{param: value}``).

    A defense that cannot run at the experiment's depth (:func:`check_depth`, skipped when
    ``check`` is false: saved rankings are not retrieved at that depth) raises
    :class:`DefenseSpecError`; a failed fit or calibration raises :class:`DefensePreparationError`."""
    d = build_defense(spec, params, calibration) if isinstance(spec, str) else spec
    if check:
        check_depth(d, experiment.depth)
    _stage("fit", d, lambda: fit_defense(experiment, d, snapshot, condition))
    if not calibrate or not needs_calibration(d):
        return d
    if clean_rankings is not None:
        rankings = list(clean_rankings)
        empty = "no clean rankings to calibrate on"
    else:
        rankings = _stage("calibrate", d, lambda: experiment.clean_rankings(clean_limit))
        empty = (f"{d.label}: the dataset has no clean queries to calibrate its threshold on; "
                 f"give the threshold ({d.threshold_param}) explicitly or add queries.jsonl")
    if not rankings:
        err = ValueError(empty)
        raise DefensePreparationError("calibrate", d.label, err) from err
    changed: dict[str, Any] = {}
    if d.corpus_time and condition != CLEAN:
        # corpus-time detectors calibrate on the clean snapshot, then defend the condition's
        _stage("fit", d, lambda: fit_defense(experiment, d, experiment.snapshot(CLEAN)))
        changed = _stage("calibrate", d, lambda: calibrate_defense(d, rankings, experiment.resources,
                                                                   clean_budget, k_ctx))
        _stage("fit", d, lambda: fit_defense(experiment, d, snapshot, condition))
    else:
        changed = _stage("calibrate", d, lambda: calibrate_defense(d, rankings, experiment.resources,
                                                                   clean_budget, k_ctx))
    if learned is not None:
        learned.update(changed)
    return d


def _stage(stage: str, defense: "Defense", fn: Callable[[], Any]) -> Any:
    """``fn()``; an exception becomes :class:`DefensePreparationError` of ``stage``."""
    try:
        return fn()
    except DefensePreparationError:
        raise
    except Exception as e:  # noqa: BLE001 - every failure of the stage, told apart by its stage
        raise DefensePreparationError(stage, defense.label, e) from e


def _plain(v: Any) -> Any:
    if hasattr(v, "item"):
        return v.item()
    return v
