"""The README's "## Python" example runs as written (with the tiny in-process models in place of the
packaged ones) and takes the one path of docs/architecture.md: Experiment + prepare_defense, never
an index's ``rank`` or a bare registry ``create``."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def readme_python_example() -> str:
    """The first ```python block of the README's "## Python" section."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    m = re.search(r"^## Python\n(.*?)(?=^## )", text, flags=re.S | re.M)
    assert m, "README.md has no '## Python' section"
    block = re.search(r"^```python\n(.*?)^```", m.group(1), flags=re.S | re.M)
    assert block, "the README's '## Python' section has no ```python block"
    return block.group(1)


def test_the_example_uses_the_public_experiment_path():
    code = readme_python_example()
    assert "from sieve.experiment import" in code and "prepare_defense(" in code and ".rank(" in code
    for forbidden in ("DEFENSES.create", "open_index", "index.rank", "sieve.defenses.pipeline", "sieve.registry"):
        assert forbidden not in code, f"the README example uses {forbidden}, a path docs/architecture.md forbids"


def test_the_example_runs(monkeypatch, capsys):
    import sieve.resources
    from sieve.testing_models import tiny_resources

    # the example's `Resources()` (packaged models) becomes the tiny in-process models
    monkeypatch.setattr(sieve.resources, "Resources", lambda *a, **k: tiny_resources())
    monkeypatch.chdir(ROOT)     # the example loads "demo_data" relative to the project
    namespace: dict = {"__name__": "readme_example"}
    exec(compile(readme_python_example(), "README.md#python", "exec"), namespace)

    lines = capsys.readouterr().out.strip().splitlines()
    assert len(lines) == 6, lines                        # five decisions, then the context ids
    result, ranking = namespace["result"], namespace["ranking"]
    assert ranking.condition == "pr_b" and len(ranking.documents) == namespace["exp"].depth
    assert any(d.poison for d in ranking.documents)      # the condition's corpus holds the pr_b poisons
    assert [d.doc_id for d in result.decisions[:5]] == [line.split()[0] for line in lines[:5]]
    context = eval(lines[-1])                            # the printed list of context ids
    assert context == [d.id for d in result.context] and len(context) == 5


@pytest.mark.parametrize("needle", ["Who was the first emperor of Rome?"])
def test_the_example_query_is_a_demo_question_with_pr_b_poisons(needle):
    code = readme_python_example()
    assert needle in code
    assert needle in (ROOT / "demo_data" / "queries.jsonl").read_text(encoding="utf-8")
    attacks = (ROOT / "demo_data" / "attacks.jsonl").read_text(encoding="utf-8")
    assert any(needle in line and '"pr_b"' in line for line in attacks.splitlines())
