"""Corpus audit at scale (issue 13): streaming ingestion into float16 memory-mapped shards
(:mod:`sieve.scale.shards`), synthetic benchmark corpora (:mod:`sieve.scale.synthetic`) and the Ray
Data engine (:mod:`sieve.scale.ray_engine`). RSG itself is sieve/defenses/rsg.py; the kNN search is
sieve/index/knn.py."""
