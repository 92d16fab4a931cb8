"""Vector stores as corpora: the source syntax (uri.py), read-only readers through each store's own
client package (readers.py) and the stored-vector agreement gate (vectors.py).

The experiment over a store, its audit and its incremental audit are sieve/experiment/stores.py.
"""
from sieve.stores.readers import StoreCorpus, read_store
from sieve.stores.uri import SCHEMES, StoreError, StoreURI, is_store_uri, parse_store_uri

__all__ = ["SCHEMES", "StoreCorpus", "StoreError", "StoreURI", "is_store_uri", "parse_store_uri", "read_store"]
