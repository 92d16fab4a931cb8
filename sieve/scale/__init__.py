"""Corpus audit at scale: streaming ingestion into float16 memory-mapped shards
(:mod:`sieve.scale.shards`), synthetic benchmark corpora (:mod:`sieve.scale.synthetic`) and the Ray
Data engine (:mod:`sieve.scale.ray_engine`). RSG itself is sieve/defenses/rsg.py (docs/algorithms.md
§4); the kNN search is sieve/index/knn.py. What it costs at 100k–1M documents: docs/results/scale.md."""
