"""The experiment core: every face of Sieve takes the same path from a query to a context.

    exp = Experiment(dataset, resources)                        # snapshots, ranking (snapshots.py)
    defense = prepare_defense(exp, "rsq", condition="pr_b")     # build, fit, calibrate (defenses.py)
    ranking = exp.rank(query, condition="pr_b", query_id=qid)
    result = defense.apply(ranking, exp.resources, k_ctx=5)     # decisions + context (sieve/defenses/base.py)

Corpus audits (RSG + ledger flags) are :mod:`sieve.experiment.audit`. See docs/architecture.md.
"""
from sieve.experiment.audit import AUDIT_MODES, AuditReport, audit_batch, record_flags, run_audit
from sieve.experiment.defenses import (
    DefensePreparationError,
    DefenseSpecError,
    build_defense,
    calibrate_defense,
    fit_defense,
    needs_calibration,
    prepare_defense,
)
from sieve.experiment.snapshots import Experiment, ExperimentError, Snapshot

__all__ = ["Experiment", "ExperimentError", "Snapshot", "build_defense", "prepare_defense", "calibrate_defense",
           "fit_defense", "needs_calibration", "DefenseSpecError", "DefensePreparationError", "run_audit",
           "record_flags", "audit_batch", "AUDIT_MODES", "AuditReport"]
