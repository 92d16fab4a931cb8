"""``sieve attack``: generate one attack family's poison documents from a dataset's targets.jsonl."""
from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from sieve.cli._app import UserError, app, user_errors


@app.command("attack")
@user_errors
def attack_command(
    dataset_dir: Path = typer.Argument(..., help="Dataset directory with corpus.jsonl and targets.jsonl."),
    attack: str = typer.Option(..., "--attack", "-a", help="Registered attack name (see `sieve list`)."),
    out: Optional[Path] = typer.Option(None, "--out", "-o", help="Write the family's attacks.jsonl lines here."),
    append_to: Optional[Path] = typer.Option(
        None, "--append-to", help="Merge into this attacks.jsonl: replace this family's lines, keep the others."),
    volume: int = typer.Option(5, "--volume", help="Poison documents per target (1-20; >5 repeats payloads)."),
    seed: int = typer.Option(0, "--seed", help="Random seed (results depend only on seed and query id)."),
    iterations: Optional[int] = typer.Option(None, "--iterations", help="pr_w: HotFlip iterations (paper 30)."),
    candidates: Optional[int] = typer.Option(None, "--candidates", help="pr_w: candidates per flip (paper 100)."),
    limit: Optional[int] = typer.Option(None, "--limit", help="Only the first N targets."),
    retriever: Optional[str] = typer.Option(None, "--retriever", help="Retriever model for pr_w (default: config)."),
    config: Optional[Path] = typer.Option(None, "--config", help="sieve.yaml config file."),
    progress: bool = typer.Option(True, "--progress/--no-progress", help="Show a progress bar."),
) -> None:
    """Generate poison documents for every target (docs/algorithms.md §7) and write attacks.jsonl lines.

    Example: sieve attack demo_data --attack pr_w --iterations 8 --candidates 24 --append-to demo_data/attacks.jsonl
    """
    from sieve.attacks import ATTACKS, AttackError, load_targets, merge_attacks, write_attacks
    from sieve.config import SieveConfig
    from sieve.resources import Resources

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
    cfg = SieveConfig.load(config)
    if retriever:
        cfg.models.retriever = retriever  # the judge is irrelevant here; no judge≠retriever check needed
    try:
        recipe = entry.create(**params)
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
        try:
            kept, written = merge_attacks(append_to, output.records, attack)
        except AttackError as e:
            raise UserError(str(e)) from None
        typer.echo(f"merged {written} {attack} records into {append_to} (kept {kept} lines of other families)")
    for qid, reason in output.skipped:
        typer.secho(f"skipped {qid}: {reason}", fg=typer.colors.YELLOW, err=True)
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
