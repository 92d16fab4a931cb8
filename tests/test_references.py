"""Every repository file that code, tests and docs point at exists.

Scanned: every ``.py`` under sieve/ (the benchmarks included), pages/, scripts/ and tests/ (plus the shell scripts in
scripts/), app.py, README.md and every ``.md`` under docs/. Checked:

* a path whose first component is a top-level project directory (docs, sieve, pages, tests, bench,
  scripts, demo_data, examples, assets) exists relative to the repository root (the top-level bench
  directory is gone — the benchmarks are ``sieve/bench/`` — so a path into it is reported). A trailing line
  number or section mark is not part of the path. Glob patterns and ``<placeholder>`` paths are
  skipped, and so are run-time output directories;
* relative markdown links in the ``.md`` files resolve;
* no file cites the upper-case reference notes that live outside the repository (the project's own
  reference is docs/algorithms.md, docs/design.md and docs/models.md);
* every section number cited as ``docs/algorithms.md §N.M`` has a heading with that number, and every
  heading quoted after a docs page (``docs/design.md "Product decisions"``) exists on that page.

Each test reports all of its failures at once, as ``file:line -> problem``.
"""
from __future__ import annotations

import re
from functools import lru_cache
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

TOP_DIRS = ("docs", "sieve", "pages", "tests", "bench", "scripts", "demo_data", "examples", "assets")
PY_DIRS = ("sieve", "pages", "scripts", "tests")
SKIP_PARTS = {"__pycache__", ".pytest_cache", ".venv", "test-artifacts", ".sieve", "node_modules"}

#: Path components created only at run time (never in the repository).
RUNTIME_PARTS = {"test-artifacts", "__pycache__", ".pytest_cache", ".sieve"}
#: Rate units that look like paths ("120 docs/s", "3 docs/query").
RATE_UNITS = {"docs/s", "docs/sec", "docs/second", "docs/min", "docs/query", "docs/q", "docs/hour"}

_DIRS = "|".join(TOP_DIRS)
# A repository path: not preceded by a word character, a dot, a slash, a colon (``RS:docs/…`` cites an
# upstream repository) or a dash; then a top-level directory, a slash and path characters.
PATH_RE = re.compile(r"(?<![\w./:\\-])((?:" + _DIRS + r")/[\w./\-*<>{}]*)")
EXTERNAL_RE = re.compile(r"(?<![\w-])(?:ALGORITHMS|DESIGN|MODELS)[.]md")
MD_LINK_RE = re.compile(r"\[[^\]\n]*\]\(([^)\s]+)\)")

ALG_DOC = "docs/algorithms.md"
_SEC = r"§\s*\d+(?:\.\d+)*"
ALG_REF_RE = re.compile(
    re.escape(ALG_DOC) + r"[\s(]*(" + _SEC + r"(?:\s*(?:,|and|&|/)?\s*" + _SEC + r")*)"
)
SEC_NUM_RE = re.compile(r"§\s*(\d+(?:\.\d+)*)")
HEADING_QUOTE_RE = re.compile(r"(docs/[\w\-]+[.]md) +[\"\u201c]([A-Za-z][^\"\u201d\n]{1,60})[\"\u201d]")


def _skipped(path: Path) -> bool:
    return any(part in SKIP_PARTS for part in path.relative_to(ROOT).parts)


@lru_cache(maxsize=1)
def source_files() -> tuple[Path, ...]:
    files: list[Path] = []
    for d in PY_DIRS:
        base = ROOT / d
        if base.is_dir():
            files += [p for p in base.rglob("*.py") if not _skipped(p)]
    scripts = ROOT / "scripts"
    if scripts.is_dir():
        files += [p for p in scripts.rglob("*.sh") if not _skipped(p)]
    docs = ROOT / "docs"
    if docs.is_dir():
        files += [p for p in docs.rglob("*.md") if not _skipped(p)]
    for name in ("app.py", "README.md"):
        if (ROOT / name).is_file():
            files.append(ROOT / name)
    return tuple(sorted(set(files)))


@lru_cache(maxsize=None)
def _text(path: Path) -> str:
    return path.read_text(encoding="utf-8", errors="replace")


def _where(path: Path, text: str, pos: int) -> str:
    return f"{path.relative_to(ROOT)}:{text.count(chr(10), 0, pos) + 1}"


def _report(problems: list[str], what: str) -> str:
    return f"{len(problems)} {what}:\n  " + "\n  ".join(problems)


def _clean_path(raw: str) -> str | None:
    """The repository path of a raw match, or None when it is not a checkable file reference."""
    if any(c in raw for c in "*<>{}"):
        return None                                   # glob pattern or placeholder
    path = raw.rstrip(".,;")                          # sentence punctuation
    path = path.rstrip("/")
    if path in RATE_UNITS:
        return None
    if any(part in RUNTIME_PARTS for part in path.split("/")):
        return None
    return path


def test_scan_finds_the_sources() -> None:
    files = source_files()
    names = {p.relative_to(ROOT).as_posix() for p in files}
    assert "tests/test_references.py" in names
    assert any(n.startswith("sieve/") for n in names)
    assert ALG_DOC in names


def test_no_references_to_external_reference_notes() -> None:
    problems = []
    for path in source_files():
        text = _text(path)
        for m in EXTERNAL_RE.finditer(text):
            problems.append(f"{_where(path, text, m.start())} -> {m.group(0)} is outside the repository; "
                            "cite docs/algorithms.md, docs/design.md or docs/models.md")
    assert not problems, _report(problems, "citation(s) of reference notes that are not in the repository")


def test_repository_paths_exist() -> None:
    problems = []
    for path in source_files():
        text = _text(path)
        for m in PATH_RE.finditer(text):
            ref = _clean_path(m.group(1))
            if ref is None or (ROOT / ref).exists():
                continue
            problems.append(f"{_where(path, text, m.start())} -> {ref}")
        if path.suffix == ".md":
            for m in MD_LINK_RE.finditer(text):
                target = m.group(1).split("#", 1)[0]
                if not target or re.match(r"^[a-z][a-z0-9+.-]*:", target) or target.startswith("/"):
                    continue                          # anchor, URL, mailto, absolute
                if not (path.parent / target).exists():
                    problems.append(f"{_where(path, text, m.start())} -> link {m.group(1)}")
    assert not problems, _report(problems, "reference(s) to missing repository paths")


@lru_cache(maxsize=None)
def _headings(doc: str) -> tuple[str, ...]:
    p = ROOT / doc
    if not p.is_file():
        return ()
    return tuple(line.lstrip("#").strip() for line in _text(p).splitlines() if re.match(r"#{1,6}\s", line))


def _section_numbers(doc: str) -> set[str]:
    return {n for h in _headings(doc) for n in SEC_NUM_RE.findall(h)}


def test_cited_algorithm_sections_exist() -> None:
    sections = _section_numbers(ALG_DOC)
    assert sections, f"{ALG_DOC} has no § headings"
    problems = []
    for path in source_files():
        text = _text(path)
        for m in ALG_REF_RE.finditer(text):
            for num in SEC_NUM_RE.findall(m.group(1)):
                if num not in sections:
                    problems.append(f"{_where(path, text, m.start())} -> {ALG_DOC} §{num} (no such heading)")
    assert not problems, _report(problems, "citation(s) of missing sections")


def test_quoted_doc_headings_exist() -> None:
    problems = []
    for path in source_files():
        text = _text(path)
        for m in HEADING_QUOTE_RE.finditer(text):
            doc, title = m.group(1), m.group(2).strip()
            if not (ROOT / doc).is_file():
                continue                              # reported by test_repository_paths_exist
            if not any(title.lower() in h.lower() for h in _headings(doc)):
                problems.append(f"{_where(path, text, m.start())} -> {doc} has no heading \"{title}\"")
    assert not problems, _report(problems, "citation(s) of missing headings")
