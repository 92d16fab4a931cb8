"""Rebuild a dataset's shipped artifacts in ``<dataset>/.artifacts`` (sieve/index/shipped.py).

    .venv/bin/python scripts/build_artifacts.py demo_data

Writes the retriever vectors (``<model>/vectors.f16.npy`` + ids + manifest with checksums,
:func:`sieve.index.export_index_artifacts`) and the artifact pack (``pack/``: judge embeddings and
causal-LM NLL traces of the corpus and every attack family's documents,
:mod:`sieve.index.shipped`) with the configured default models. Run it after the corpus, the attacks
or a default model changed; commit the result. Progress bars on stderr.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from sieve.corpus import load_dataset  # noqa: E402
from sieve.index import export_index_artifacts, open_index  # noqa: E402
from sieve.index.shipped import export_pack  # noqa: E402
from sieve.resources import Resources  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("dataset", help="dataset directory (its .artifacts/ is rewritten)")
    args = ap.parse_args()
    t0 = time.perf_counter()
    ds = load_dataset(args.dataset)
    res = Resources()
    index = open_index(ds, res, progress=True)
    print(f"vectors  {export_index_artifacts(index, Path(ds.path) / '.artifacts')}")
    out = export_pack(ds, res)
    for f in json.loads((out / "manifest.json").read_text(encoding="utf-8"))["files"]:
        print(f"pack     {f['file']}: {f['n']} passages, {f['bytes'] / 1e6:.2f} MB")
    print(f"total    {time.perf_counter() - t0:.0f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
