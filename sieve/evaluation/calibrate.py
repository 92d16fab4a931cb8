"""Clean-only threshold calibration and the calibration file (``sieve calibrate``).

A calibration file is YAML::

    defenses:
      perplexity: {threshold: 4.21}
      rsq: {threshold: 1.37}
    meta:                       # provenance, informational
      perplexity: {clean_budget: 0.05, dataset: demo_data, n_rankings: 128, ...}

The runner (``sieve eval --calibration FILE``) and the dashboard pass ``defenses[NAME]`` as
parameters to the defense ``NAME``. Thresholds are learned with :meth:`Defense.calibrate` on the
*clean* rankings of the dataset's queries only (never on attack data) so that at most the clean
budget of the clean documents the defense scores would be removed (strict rule, ALGORITHMS.md §9.2).
"""
from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from sieve.config import ConfigError, read_yaml_mapping

if TYPE_CHECKING:
    from sieve.corpus import Dataset
    from sieve.defenses.base import Defense
    from sieve.resources import Resources
    from sieve.types import Ranking


def load_calibration(path: str | Path | None) -> dict[str, dict[str, Any]]:
    """``{defense name: {param: value}}`` from a calibration YAML file (``{}`` for ``None``)."""
    if path is None:
        return {}
    p = Path(path)
    data = read_yaml_mapping(p, "calibration file")
    defs = data.get("defenses", {}) or {}
    if not isinstance(defs, dict):
        raise ConfigError(f"{p}: 'defenses' must be a mapping of defense name → {{param: value}}")
    out: dict[str, dict[str, Any]] = {}
    for name, params in defs.items():
        if not isinstance(params, dict):
            raise ConfigError(f"{p}: defenses.{name} must be a mapping of parameter → value")
        for k, v in params.items():
            if isinstance(v, (dict, list)):
                raise ConfigError(f"{p}: defenses.{name}.{k} must be a scalar value")
        out[str(name)] = dict(params)
    return out


def save_calibration(path: str | Path, defense: str, params: dict[str, Any],
                     meta: dict[str, Any] | None = None) -> Path:
    """Merge ``params`` for ``defense`` into the calibration file (created if missing)."""
    import yaml

    p = Path(path)
    data: dict[str, Any] = read_yaml_mapping(p, "calibration file") if p.is_file() else {}
    data.setdefault("defenses", {})[defense] = {k: _plain(v) for k, v in params.items()}
    if meta:
        data.setdefault("meta", {})[defense] = {k: _plain(v) for k, v in meta.items()}
    p.parent.mkdir(parents=True, exist_ok=True)
    tmp = p.with_name(f".{p.name}.tmp")
    tmp.write_text(yaml.safe_dump(data, sort_keys=True), encoding="utf-8")
    tmp.replace(p)
    return p


def _plain(v: Any) -> Any:
    if hasattr(v, "item"):
        return v.item()
    return v


def apply_calibration(defense: "Defense", calibration: dict[str, dict[str, Any]], name: str | None = None) -> "Defense":
    """Set the calibrated parameters of ``defense`` (looked up by ``name`` or its label)."""
    params = calibration.get(name or defense.label)
    if params:
        defense.set_params(**params)
    return defense


def clean_rankings(ds: "Dataset", resources: "Resources", depth: int = 50) -> tuple[list["Ranking"], Any]:
    """The clean rankings of the dataset's queries (saved clean contexts when the dataset has
    ``contexts.jsonl``, else retrieval at ``depth`` on the corpus only) and the clean snapshot
    (``None`` when not built)."""
    from sieve.evaluation.runner import CLEAN, plan_conditions

    plan = plan_conditions(ds, attacks=[])
    items = dict(plan.conditions)[CLEAN]
    if plan.mode == "contexts":
        return [it.saved for it in items if it.saved is not None], None
    from sieve.index import open_index

    index = open_index(ds, resources, progress=False)
    return [index.rank(it.query, depth, query_id=it.query_id, condition=CLEAN, correct_answers=it.correct_answers)
            for it in items], index


def calibrate_defense(ds: "Dataset", name: str, resources: "Resources", clean_budget: float = 0.05,
                      depth: int = 50) -> dict[str, Any]:
    """Learn the threshold of defense ``name`` on the clean rankings of ``ds``.

    Returns ``{"params": {param: value}, "meta": {...}}``. Raises ``ValueError`` if the defense has
    nothing to calibrate or produced no clean scores.
    """
    from sieve.evaluation.runner import make_defense

    d = make_defense(name)
    if d.threshold_param is None:
        raise ValueError(f"defense {name!r} has no score threshold to calibrate")
    rankings, snapshot = clean_rankings(ds, resources, depth)
    if not rankings:
        raise ValueError(f"dataset {ds.path} has no clean queries to calibrate on")
    if d.corpus_time:
        if snapshot is None:
            from sieve.index import open_index

            snapshot = open_index(ds, resources, progress=False)
        d.fit(snapshot, resources)
    d.calibrate(rankings, resources, clean_budget)
    value = getattr(d, d.threshold_param)
    return {"params": {d.threshold_param: float(value)},
            "meta": {"clean_budget": clean_budget, "dataset": str(ds.path), "n_rankings": len(rankings),
                     "depth": depth}}
