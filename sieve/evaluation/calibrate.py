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
budget of the clean documents the defense scores would be removed (strict rule, docs/algorithms.md §9.2).
"""
from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from sieve.config import ConfigError, read_yaml_mapping
from sieve.constants import CLEAN_BUDGET, DEPTH

if TYPE_CHECKING:
    from sieve.corpus import Dataset
    from sieve.defenses.base import Defense
    from sieve.resources import Resources


#: The top-level keys of a calibration file.
CALIBRATION_KEYS = ("defenses", "meta")


def load_calibration(path: str | Path | None) -> dict[str, dict[str, Any]]:
    """``{defense name: {param: value}}`` from a calibration YAML file (``{}`` for ``None``)."""
    if path is None:
        return {}
    p = Path(path)
    data = read_yaml_mapping(p, "calibration file")
    unknown = sorted(str(k) for k in data if k not in CALIBRATION_KEYS)
    if unknown:   # e.g. a defense's parameters written at the top level would otherwise be ignored
        from sieve.registry import DEFENSES  # lazily: the registry imports every defense module

        hint = f" (did you mean defenses.{unknown[0]}?)" if unknown[0] in DEFENSES.names() else ""
        raise ConfigError(f"{p}: unknown top-level key {unknown[0]!r}; a calibration file holds 'defenses' "
                          f"(defense name → {{param: value}}) and 'meta'{hint}")
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


def is_calibration_file(path: str | Path) -> bool:
    """True when ``path`` is a calibration file (a YAML mapping with only ``defenses`` / ``meta``
    mappings, or empty) — one ``sieve calibrate`` may merge into."""
    try:
        data = read_yaml_mapping(Path(path), "calibration file")
    except Exception:  # noqa: BLE001 - unreadable or not YAML: not ours
        return False
    return set(data) <= set(CALIBRATION_KEYS) and all(isinstance(v, dict) for v in data.values())


def save_calibration(path: str | Path, defense: str, params: dict[str, Any],
                     meta: dict[str, Any] | None = None, *, merge: bool = True) -> Path:
    """Merge ``params`` for ``defense`` into the calibration file (created if missing; replaced
    instead of merged when ``merge`` is false). Written atomically."""
    import yaml

    from sieve.safe_io import atomic_write_text

    p = Path(path)
    data: dict[str, Any] = read_yaml_mapping(p, "calibration file") if merge and p.is_file() else {}
    data.setdefault("defenses", {})[defense] = {k: _plain(v) for k, v in params.items()}
    if meta:
        data.setdefault("meta", {})[defense] = {k: _plain(v) for k, v in meta.items()}
    p.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(p, yaml.safe_dump(data, sort_keys=True))
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


def calibrate_on_dataset(ds: "Dataset", name: str, resources: "Resources", clean_budget: float = CLEAN_BUDGET,
                         depth: int = DEPTH) -> dict[str, Any]:
    """Learn the threshold of defense ``name`` on the clean rankings of ``ds`` (``sieve calibrate``).

    Returns ``{"params": {param: value}, "meta": {...}}``. Raises ``ValueError`` if the defense has
    nothing to calibrate or the dataset has no clean queries. Preparation goes through
    :func:`sieve.experiment.prepare_defense` like every other face.
    """
    from sieve.experiment import Experiment, build_defense, prepare_defense

    d = build_defense(name)
    if d.threshold_param is None:
        raise ValueError(f"defense {name!r} has no score threshold to calibrate")
    exp = Experiment(ds, resources, depth=depth)
    rankings = exp.clean_rankings()
    if not rankings:
        raise ValueError(f"dataset {ds.path} has no clean queries to calibrate on")
    prepare_defense(exp, d, clean_rankings=rankings, clean_budget=clean_budget)
    value = getattr(d, d.threshold_param)
    return {"params": {d.threshold_param: float(value)},
            "meta": {"clean_budget": clean_budget, "dataset": str(ds.path), "n_rankings": len(rankings),
                     "depth": depth}}
