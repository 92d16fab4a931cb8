"""Resources and experiments for a configuration: the one way every face and bench opens a dataset.

:func:`make_resources` gives the packaged models (loaded lazily) over the persistent artifact cache,
or the tiny in-process models for the hidden ``tiny-hashing`` retriever (tests, smoke runs);
:func:`open_experiment` gives an experiment whose retriever index lives in the workspace (built or
reused). Errors are the library's (:class:`~sieve.experiment.ExperimentError`, ``ValueError``): the
CLI turns them into one-line messages (sieve/cli/common.py). See docs/architecture.md.
"""
from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from sieve.models.tiny import TESTING_RETRIEVER

if TYPE_CHECKING:
    from sieve.config import SieveConfig
    from sieve.corpus import Dataset
    from sieve.experiment.snapshots import Experiment
    from sieve.resources import Resources


def make_resources(cfg: "SieveConfig", ds: "Dataset | None" = None) -> "Resources":
    """The models of ``cfg`` with the persistent artifact cache (module docstring); the tiny models
    are fitted on ``ds``'s texts."""
    from sieve.index import ArtifactCache

    cache = ArtifactCache.default(cfg)
    if cfg.models.retriever == TESTING_RETRIEVER:
        from sieve.testing_models import tiny_resources

        llm = None
        if cfg.llm.enabled and cfg.llm.resolved_base_url():   # a configured endpoint is real, even here
            from sieve.models.loaders import load_llm

            llm = load_llm(cfg)
        return tiny_resources(cfg, [d.text for d in ds.documents] if ds is not None else (), llm=llm, cache=cache)
    from sieve.resources import Resources

    return Resources(cfg, cache=cache)


def open_experiment(ds: "Dataset", cfg: "SieveConfig", *, depth: int | None = None, progress: bool = True,
                    ledger_path: Path | None = None, quarantine: str = "none",
                    resources: "Resources | None" = None) -> "Experiment":
    """An experiment over ``ds`` whose retriever index is built (or reused from the workspace) now,
    so that a bad corpus fails here rather than at the first query."""
    from sieve.constants import DEPTH
    from sieve.experiment.snapshots import Experiment

    exp = Experiment(ds, resources if resources is not None else make_resources(cfg, ds), depth=depth or DEPTH,
                     ledger_path=ledger_path, quarantine=quarantine, persist=True, progress=progress)
    exp.base_index()
    return exp
