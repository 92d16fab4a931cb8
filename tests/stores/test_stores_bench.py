"""``sieve bench stores`` at a CI size (``--size``, the in-process hashing retriever, a real embedded
Chroma): the incremental audit's flags for the batch equal the full re-audit's, and the batch's
poisons are caught."""
from __future__ import annotations

import re

from sieve.bench.stores_bench import main


def test_bench_stores_ci_size(capsys, tmp_path):
    main(["--size", "1200", "--batch", "200", "--retriever", "tiny-hashing", "--workdir", str(tmp_path / "w")])
    out = capsys.readouterr().out
    assert "corpus     1,200 passages" in out and "1,000 earlier + 200 new" in out
    m = re.search(r"incremental --since (S-[0-9a-f]{12}): .*\((\d+) new, (\d+) kNN lists searched, ([\d,]+) merged\)", out)
    assert m and (m.group(2), m.group(3), m.group(4)) == ("200", "200", "1,000")
    assert "new passages' flags equal: True" in out
    assert re.search(r"\(\d+ of 200 flagged; 50 of 50 poisons\)", out)
    assert "passed: True" in out
    assert (tmp_path / "w" / "chroma" / "chroma.sqlite3").is_file()


def test_sieve_bench_passes_options_through_without_a_separator(tmp_path):
    """`sieve bench stores --size …` runs the bench with those options (the README's form), as
    `sieve bench stores -- --size …` does; --first-alert-only times step 4 alone."""
    from typer.testing import CliRunner

    from sieve.cli import app

    for sep in ([], ["--"]):
        work = tmp_path / ("sep" if sep else "plain")
        r = CliRunner().invoke(app, ["bench", "stores", *sep, "--size", "900", "--batch", "100", "--retriever",
                                     "tiny-hashing", "--first-alert-only", "--workdir", str(work)])
        assert r.exit_code == 0, r.output
        assert "corpus     900 passages" in r.output and re.search(r"first alert [\d.]+ s without re-embedding", r.output)
        assert "incremental" not in r.output and "full       exact" not in r.output   # steps 1–3 skipped
