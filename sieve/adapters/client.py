"""Backends of the framework adapters: the same decisions in-process or from ``sieve serve``.

* :class:`SieveClient` — a JSON-over-HTTP client of ``sieve serve`` (``POST /v1/filter``); never
  imports the service.
* :class:`LocalSieve` — in-process, through :class:`sieve.experiment.filtering.DocumentFilter`
  (the library path the service uses too).

Both answer :meth:`filter` with the ``/v1/filter`` response as a plain dict (docs/service.md), so
the LangChain and LlamaIndex adapters do not care which one they hold. Documents quarantined in
the ledger (same id and content hash) are excluded either way.

Defaults need no LLM: the default defense is ``tris_l2`` (:data:`DEFAULT_DEFENSE`, TRIS's
structural prefix filter), and :meth:`LocalSieve.from_dataset` reads a quarantine ledger only when
given one (``ledger_path=``, or ``default_ledger=True`` for the shared ``<cache dir>/ledger.sqlite``).
:meth:`SieveClient.check` verifies the server and the token before any expensive work.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping, Protocol, Sequence

from sieve.constants import K_CTX

if TYPE_CHECKING:
    from sieve.experiment import Experiment
    from sieve.resources import Resources


#: The adapters' default defense: needs the judge embedder only, no LLM and no generator.
DEFAULT_DEFENSE = "tris_l2"


class SieveError(RuntimeError):
    """``sieve serve`` refused a request (4xx/5xx); the message carries its answer."""

    def __init__(self, message: str, status: int = 0) -> None:
        super().__init__(message)
        self.status = status


class FilterBackend(Protocol):
    def filter(self, query: str, documents: Sequence[Mapping[str, Any]], defense: str,
               params: Mapping[str, Any] | None = None, k_ctx: int | None = K_CTX) -> dict[str, Any]: ...


class SieveClient:
    """Client of a running ``sieve serve``. ``token`` defaults to ``$SIEVE_API_TOKEN``."""

    def __init__(self, base_url: str, token: str | None = None, timeout: float = 120.0) -> None:
        import httpx

        self.base_url = base_url.rstrip("/")
        tok = token if token is not None else os.environ.get("SIEVE_API_TOKEN") or None
        headers = {"Authorization": f"Bearer {tok}"} if tok else {}
        self._http = httpx.Client(base_url=self.base_url, headers=headers, timeout=timeout)

    def _call(self, method: str, path: str, **kw: Any) -> Any:
        import httpx

        try:
            r = self._http.request(method, path, **kw)
        except httpx.HTTPError as e:
            raise SieveError(f"sieve serve at {self.base_url} unreachable: {e}") from None
        if r.status_code >= 400:
            try:
                detail = r.json().get("detail")
            except ValueError:
                detail = r.text[:300]
            if isinstance(detail, list):
                detail = "; ".join(f"{'.'.join(str(x) for x in d.get('loc', []))}: {d.get('msg', '')}" for d in detail)
            raise SieveError(f"sieve serve answered {r.status_code} to {method} {path}: {detail}", r.status_code)
        return r.json() if r.headers.get("content-type", "").startswith("application/json") else r.text

    def filter(self, query: str, documents: Sequence[Mapping[str, Any]], defense: str = DEFAULT_DEFENSE,
               params: Mapping[str, Any] | None = None, k_ctx: int | None = K_CTX) -> dict[str, Any]:
        body = {"query": query, "documents": [dict(d) for d in documents], "defense": defense,
                "params": dict(params or {}), "k_ctx": k_ctx}
        return self._call("POST", "/v1/filter", json=body)

    def health(self) -> dict[str, Any]:
        return self._call("GET", "/healthz")

    def check(self) -> dict[str, Any]:
        """Reach the server and check the token now (``GET /v1/defenses`` needs it), before any
        expensive work such as embedding a corpus; raises :class:`SieveError` with the answer
        (e.g. 401: missing or wrong token). Returns the server's defenses."""
        try:
            return self._call("GET", "/v1/defenses")
        except SieveError as e:
            if e.status == 401:
                raise SieveError(f"{e} — set SIEVE_API_TOKEN (or token=) to the token `sieve serve` was started "
                                 "with", 401) from None
            raise

    def alerts(self, state: str | None = None) -> dict[str, Any]:
        return self._call("GET", "/v1/alerts", params={"state": state} if state else None)

    def quarantine(self, doc_id: str, text: str, who: str, reason: str = "") -> dict[str, Any]:
        """Flag one document by hand (an open alert): excluded from every later filter call."""
        return self._call("POST", "/v1/quarantine", json={"doc_id": doc_id, "text": text, "who": who, "reason": reason})

    def transition(self, alert_id: str, action: str, who: str, why: str = "") -> dict[str, Any]:
        """``action``: confirm, dismiss or rollback (rollback needs ``why``)."""
        return self._call("POST", f"/v1/alerts/{alert_id}/{action}", json={"who": who, "why": why})

    def close(self) -> None:
        self._http.close()


class LocalSieve:
    """In-process backend: the defenses of an :class:`~sieve.experiment.Experiment`, prepared once per
    (spec, params) and calibrated on its clean queries, with the quarantine ledger read per call."""

    def __init__(self, experiment: "Experiment", *, ledger_path: str | Path | None = None,
                 quarantine: str = "open_and_confirmed", clean_limit: int | None = None) -> None:
        from sieve.experiment.filtering import DocumentFilter

        self.filterer = DocumentFilter(experiment, ledger_path=ledger_path, quarantine=quarantine,
                                       clean_limit=clean_limit)

    @classmethod
    def from_dataset(cls, dataset_dir: str | Path, resources: "Resources | None" = None, *,
                     ledger_path: str | Path | None = None, quarantine: str = "open_and_confirmed",
                     clean_limit: int | None = None, default_ledger: bool = False) -> "LocalSieve":
        """A backend over a dataset directory (its clean queries calibrate thresholds) with the
        configured models (``resources``; default: the packaged models, loaded lazily). The
        quarantine ledger is read only when asked: ``ledger_path=`` a ledger file, or
        ``default_ledger=True`` for the shared ``<cache dir>/ledger.sqlite`` that ``sieve audit``,
        ``sieve serve`` and the dashboard write; without either, no document is excluded."""
        from sieve.corpus import load_dataset
        from sieve.experiment import Experiment

        ds = load_dataset(Path(dataset_dir))
        resources, lp, q = _ledger_choice(resources, ledger_path, quarantine, default_ledger)
        exp = Experiment(ds, resources, ledger_path=lp, quarantine=q)
        return cls(exp, ledger_path=lp, quarantine=q, clean_limit=clean_limit)

    @classmethod
    def from_store(cls, source: str, resources: "Resources | None" = None, *,
                   ledger_path: str | Path | None = None, quarantine: str = "open_and_confirmed",
                   store_model: str | None = None, default_ledger: bool = False) -> "LocalSieve":
        """A backend over a vector store (``chroma:///dir?collection=NAME``, ``qdrant:...``,
        ``lancedb:...``; sieve/stores/uri.py) that the application's retriever reads: the corpus
        and its stored vectors (agreement gate, else re-embedded) for corpus-time defenses, and the
        quarantine ledger as in :meth:`from_dataset` — alerts of ``sieve audit SOURCE`` that are open
        or confirmed are excluded from every call. A store has no queries: give thresholds in
        ``params`` or use defenses that need no calibration (``none``, ``rsg``)."""
        from sieve.experiment.stores import open_store

        resources, lp, q = _ledger_choice(resources, ledger_path, quarantine, default_ledger)
        exp, _ = open_store(source, resources, store_model=store_model, ledger_path=lp, quarantine=q)
        return cls(exp, ledger_path=lp, quarantine=q)

    def filter(self, query: str, documents: Sequence[Mapping[str, Any]], defense: str = DEFAULT_DEFENSE,
               params: Mapping[str, Any] | None = None, k_ctx: int | None = K_CTX) -> dict[str, Any]:
        from sieve.experiment.filtering import InputDocument

        docs = [InputDocument(str(d["id"]), str(d["text"]), str(d.get("title") or ""),
                              None if d.get("score") is None else float(d["score"])) for d in documents]
        return self.filterer.filter(query, docs, defense, params, k_ctx).to_dict()


def backend_for(backend: Any = None, base_url: str | None = None, token: str | None = None) -> FilterBackend:
    """The backend an adapter uses: ``backend`` as given, else a :class:`SieveClient` of ``base_url``."""
    if backend is not None and base_url is not None:
        raise ValueError("give either an in-process backend or base_url, not both")
    if backend is not None:
        return backend
    if base_url:
        return SieveClient(base_url, token=token)
    raise ValueError("give backend=LocalSieve(...) (in-process) or base_url='http://127.0.0.1:8765' (sieve serve)")


def _ledger_choice(resources: "Resources | None", ledger_path: str | Path | None, quarantine: str,
                   default_ledger: bool) -> tuple["Resources", Path | None, str]:
    """(resources, ledger path, quarantine policy) of a local backend: no ledger unless one is given
    (``ledger_path``) or asked for (``default_ledger=True``, the one ``sieve serve`` and the dashboard
    write); without one, nothing is excluded."""
    from sieve.ledger import default_ledger_path

    if resources is None:
        from sieve.resources import Resources

        resources = Resources()
    if ledger_path is not None and default_ledger:
        raise ValueError("give ledger_path= or default_ledger=True, not both")
    lp = Path(ledger_path) if ledger_path is not None else (
        default_ledger_path(resources.config) if default_ledger else None)
    return resources, lp, (quarantine if lp is not None else "none")
