"""``sieve attack``: generate one attack family's poison documents from a dataset's targets.jsonl.

Writes are guarded (sieve/safe_io.py): ``--out`` never replaces a dataset file and replaces an
existing file only if it holds nothing but this family's records (or with ``--force``);
``--append-to`` replaces only the lines of the targets that were regenerated and keeps every other
line (other families, and this family's other targets, e.g. after ``--limit``).
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Optional

import typer

from sieve.cli._app import UserError, app, user_errors
from sieve.cli.common import plain


@app.command("attack")
@user_errors
def attack_command(
    dataset_dir: Path = typer.Argument(..., help="Dataset directory with corpus.jsonl and targets.jsonl."),
    attack: str = typer.Option(..., "--attack", "-a", help="Registered attack name (see `sieve list`)."),
    out: Optional[Path] = typer.Option(None, "--out", "-o", help="Write the family's attacks.jsonl lines here."),
    append_to: Optional[Path] = typer.Option(
        None, "--append-to", help="Merge into this attacks.jsonl: replace the lines of the regenerated targets, "
                                  "keep every other line."),
    volume: int = typer.Option(5, "--volume", help="Poison documents per target (1-20; >5 repeats payloads)."),
    seed: int = typer.Option(0, "--seed", help="Random seed (results depend only on seed and query id)."),
    iterations: Optional[int] = typer.Option(None, "--iterations", help="pr_w: HotFlip iterations (paper 30)."),
    candidates: Optional[int] = typer.Option(None, "--candidates", help="pr_w: candidates per flip (paper 100)."),
    limit: Optional[int] = typer.Option(None, "--limit", help="Only the first N targets."),
    retriever: Optional[str] = typer.Option(None, "--retriever", help="Retriever model for pr_w (default: config)."),
    config: Optional[Path] = typer.Option(None, "--config", help="sieve.yaml config file."),
    progress: bool = typer.Option(True, "--progress/--no-progress", help="Show a progress bar."),
    force: bool = typer.Option(False, "--force", help="Let --out replace an existing file that holds other "
                                                      "records (dataset files are never replaced)."),
) -> None:
    """Generate poison documents for every target (docs/algorithms.md §7) and write attacks.jsonl lines.

    Example: sieve attack demo_data --attack pr_w --iterations 8 --candidates 24 --append-to demo_data/attacks.jsonl
    """
    from sieve.attacks import ATTACKS, AttackError, load_targets, write_attacks
    from sieve.config import SieveConfig
    from sieve.resources import Resources
    from sieve.safe_io import check_output, dataset_files

    if out is None and append_to is None:
        raise UserError("give --out FILE and/or --append-to DATASET_DIR/attacks.jsonl")
    if limit is not None and limit < 1:
        raise UserError(f"--limit must be >= 1, got {limit}")
    entry = ATTACKS.entry(attack)  # KeyError lists the registered names
    params: dict[str, int] = {}
    for flag, value in (("iterations", iterations), ("candidates", candidates)):
        if value is not None:
            if attack != "pr_w":
                raise UserError(f"--{flag} applies to pr_w only, not {attack!r}")
            params[flag] = value
    ds_files = dataset_files(dataset_dir)
    if out is not None:
        check_output(out, force=force, protected=ds_files, what="--out",
                     own=lambda p: _only_family(p, attack))
    if append_to is not None:
        check_output(append_to, force=True, what="--append-to",
                     dataset_file_ok=append_to.name.startswith("attacks"),
                     protected=[f for f in ds_files if not f.name.startswith("attacks")])
        _read_attack_lines(append_to)   # a malformed file fails before any generation work
    cfg = SieveConfig.load(config)
    if retriever:
        cfg.models.retriever = retriever  # the judge is irrelevant here; no judge≠retriever check needed
    try:
        recipe = entry.create(**params)
        if "data" in entry.param_names() and not recipe.data:   # near_duplicate, judge_aware read the dataset
            recipe.set_params(data=str(dataset_dir))
        targets = load_targets(dataset_dir)
        if limit is not None:
            targets = targets[:limit]
        output = recipe.generate(targets, Resources(cfg), seed=seed, volume=volume, progress=progress)
    except (AttackError, ValueError) as e:
        raise UserError(str(e)) from None
    if out is not None:
        write_attacks(out, output.records)
        typer.echo(f"wrote {len(output.records)} {attack} records ({len(output.documents)} documents) to {out}")
    if append_to is not None:
        from sieve.attacks import merge_attacks

        try:
            kept, replaced, written = merge_attacks(append_to, output.records, attack)
        except AttackError as e:
            raise UserError(str(e)) from None
        typer.echo(f"merged {written} {attack} records into {append_to} (replaced {replaced} earlier lines of "
                   f"these targets, kept {kept} other lines)")
    for qid, reason in output.skipped:
        typer.secho(f"skipped {plain(qid)}: {plain(reason)}", fg=typer.colors.YELLOW, err=True)
    st = output.stats
    typer.echo(f"targets {st['targets']}, generated {st['generated']}, skipped {st['skipped']}, "
               f"{st['seconds']:.1f} s")
    if "mean_similarity_gain" in st:
        typer.echo(f"pr_w: similarity {st['mean_similarity_before']:.4f} -> {st['mean_similarity_after']:.4f} "
                   f"(mean gain {st['mean_similarity_gain']:+.4f}, improved {st['improved_fraction']:.0%}), "
                   f"{st['seconds_per_target']:.1f} s/target")
    if "paraphrase_fallbacks" in st:
        extra = f" ({st['paraphrase_unavailable']})" if st.get("paraphrase_unavailable") else ""
        typer.echo(f"paraphrase: {st['paraphrase_fallbacks']} fallbacks to the verbatim query{extra}, "
                   f"{st['paraphrase_cached']} from cache, {st['paraphrase_llm_calls']} LLM calls")


def _read_attack_lines(path: Path) -> list[dict[str, Any]]:
    """:func:`sieve.attacks.read_attack_lines` with its error as a one-line user error."""
    from sieve.attacks import AttackError, read_attack_lines

    try:
        return read_attack_lines(path)
    except AttackError as e:
        raise UserError(str(e)) from None


def _only_family(path: Path, family: str) -> bool:
    """True when ``path`` holds only ``family``'s attack lines (an earlier ``--out`` of this family)."""
    try:
        rows = _read_attack_lines(path)
    except UserError:
        return False
    return all(r.get("attack") == family for r in rows)
