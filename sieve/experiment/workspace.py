"""Resources and experiments for a configuration: the one way every face and bench opens a dataset.

:func:`make_resources` gives the packaged models (loaded lazily) over the persistent artifact cache,
or the tiny in-process models for the hidden ``tiny-hashing`` retriever (tests, smoke runs);
:func:`open_experiment` gives an experiment whose retriever index lives in the workspace (built or
reused). Errors are the library's (:class:`~sieve.experiment.ExperimentError`, ``ValueError``): the
CLI turns them into one-line messages (sieve/cli/common.py). See docs/architecture.md.
"""
from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Sequence

from sieve.models.tiny import TESTING_RETRIEVER

if TYPE_CHECKING:
    from sieve.config import SieveConfig
    from sieve.corpus import Dataset
    from sieve.experiment.snapshots import Experiment
    from sieve.resources import Resources


def make_resources(cfg: "SieveConfig", ds: "Dataset | None" = None, texts: "Sequence[str] | None" = None
                   ) -> "Resources":
    """The models of ``cfg`` with the persistent artifact cache (module docstring); the tiny models
    are fitted on ``texts`` (default: ``ds``'s documents)."""
    from sieve.index import ArtifactCache

    cache = ArtifactCache.default(cfg)
    if cfg.models.retriever == TESTING_RETRIEVER:
        from sieve.testing_models import tiny_resources

        llm = None
        if cfg.llm.enabled and cfg.llm.resolved_base_url():   # a configured endpoint is real, even here
            from sieve.models.loaders import load_llm

            llm = load_llm(cfg)
        if texts is None:
            texts = [d.text for d in ds.documents] if ds is not None else ()
        return tiny_resources(cfg, list(texts), llm=llm, cache=cache)
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


def adopt_store_model(cfg: "SieveConfig", named: str | None, *, retriever_given: bool = False,
                      reembed: bool = False) -> bool:
    """Make ``named`` (the model a store says wrote its vectors) the retriever of ``cfg`` when Sieve has
    it, no retriever was asked for and re-embedding was not — so the stored vectors can pass the
    agreement gate (sieve/stores/vectors.py). The judge, which must differ from the retriever, takes
    the old retriever when it was ``named``. Returns whether ``cfg`` changed; a model Sieve does not
    have leaves it as it was (the gate then says why Sieve re-embeds)."""
    import copy

    from sieve.stores.vectors import same_model

    if not named or retriever_given or reembed or same_model(named, cfg.models.retriever):
        return False
    trial = copy.deepcopy(cfg)
    previous, trial.models.retriever = trial.models.retriever, named
    if same_model(named, trial.models.judge):
        trial.models.judge = previous
    try:
        trial.validate()
    except Exception:  # noqa: BLE001 - a model Sieve does not have: the gate says so, Sieve re-embeds
        return False
    cfg.models.retriever, cfg.models.judge = trial.models.retriever, trial.models.judge
    return True
