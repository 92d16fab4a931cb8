"""Request limits of ``sieve serve``: body bytes (413), document count and text lengths (422), the
admission queue (503 + ``Retry-After``), defense parameter types (422) and the bounded cache of
prepared defenses.

Every answer names the offending field, in FastAPI's error shape
``{"detail": [{"loc": [...], "msg": ..., "type": ...}]}``.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Awaitable, Callable, Mapping

from fastapi import HTTPException

Scope = dict[str, Any]
Message = dict[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]


@dataclass(frozen=True)
class Limits:
    """``max_body_bytes`` per request; ``max_documents`` per /v1/filter; ``max_text_chars`` per
    document text and ``max_query_chars`` per query."""

    max_body_bytes: int = 2_000_000
    max_documents: int = 200
    max_text_chars: int = 20_000
    max_query_chars: int = 2_000
    #: requests of the work routes running at once / waiting (beyond: 503 + Retry-After at once)
    workers: int = 2
    queue: int = 16
    #: longest wait in the queue, seconds (then 503 + Retry-After)
    deadline_s: float = 10.0
    #: a running request past this many seconds stops at its next safe point (503); 0 = no run deadline
    run_deadline_s: float = 60.0
    #: prepared (defense, params) entries kept besides the --preload ones (least recently used dropped)
    max_prepared: int = 16

    def check_filter(self, query: str, texts: list[str], k_ctx: int | None = None) -> None:
        """Raise 422 naming the field when the request is over a limit."""
        if len(query) > self.max_query_chars:
            raise limit_error(["body", "query"], f"query has {len(query)} characters; the limit is {self.max_query_chars}")
        if len(texts) > self.max_documents:
            raise limit_error(["body", "documents"],
                              f"{len(texts)} documents; the limit is {self.max_documents} per request")
        for i, t in enumerate(texts):
            if len(t) > self.max_text_chars:
                raise limit_error(["body", "documents", i, "text"],
                                  f"documents[{i}].text has {len(t)} characters; the limit is {self.max_text_chars}")
        if k_ctx is not None and k_ctx > self.max_documents:
            raise limit_error(["body", "k_ctx"], f"k_ctx is {k_ctx}; it can be at most the document limit "
                                                 f"{self.max_documents} (null keeps every survivor)")


def limit_error(loc: list[Any], msg: str, status: int = 422, kind: str = "limit") -> HTTPException:
    """An HTTP error in FastAPI's shape naming the field at ``loc``."""
    return HTTPException(status, detail=[{"loc": loc, "msg": msg, "type": kind}])


class BodySizeLimit:
    """ASGI middleware: answer 413 when a request body exceeds ``max_bytes`` (Content-Length, or
    counted while streaming when there is none)."""

    def __init__(self, app: Any, max_bytes: int) -> None:
        self.app = app
        self.max_bytes = int(max_bytes)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        for k, v in scope.get("headers", []):
            if k == b"content-length":
                try:
                    n = int(v)
                except ValueError:
                    n = 0
                if n > self.max_bytes:
                    await self._reject(send, n)
                    return
        # no Content-Length (chunked): read the body up to the limit, then replay it to the app
        chunks: list[bytes] = []
        seen = 0
        while True:
            msg = await receive()
            if msg["type"] != "http.request":
                break
            body = msg.get("body", b"")
            seen += len(body)
            if seen > self.max_bytes:
                await self._reject(send, seen)
                return
            chunks.append(body)
            if not msg.get("more_body", False):
                break
        replay = [{"type": "http.request", "body": b"".join(chunks), "more_body": False}]

        async def replayed() -> Message:
            return replay.pop() if replay else await receive()

        await self.app(scope, replayed, send)

    async def _reject(self, send: Send, n: int) -> None:
        body = json.dumps({"detail": [{"loc": ["body"], "msg": f"request body has {n} bytes or more; the limit is "
                                       f"{self.max_bytes} bytes", "type": "limit"}]}).encode()
        await send({"type": "http.response.start", "status": 413,
                    "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]})
        await send({"type": "http.response.body", "body": body})


# -- admission control: a bounded queue with a deadline per request ------------------------------------

class Cancelled(Exception):
    """Raised by :meth:`Cancel.check` at a safe point of a running request that was abandoned."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class Cancel:
    """The cancellation state of one admitted request, handed to the endpoint in the ASGI scope
    (``scope["sieve.cancel"]``, :func:`cancel_of`). The middleware sets it when the client
    disconnects or the server shuts down; ``run_deadline`` (a ``time.monotonic()`` value, or
    ``None``) is the latest time at which the request may still start another step. Endpoints call
    :meth:`check` at their safe points (docs/service.md "Cancellation"): a defense call that is
    already running is never interrupted."""

    GONE = "the client disconnected"
    CLOSING = "the server is shutting down"

    def __init__(self, run_deadline: float | None = None, run_deadline_s: float = 0.0) -> None:
        import threading

        self.event = threading.Event()
        self.reason = ""
        self.run_deadline = run_deadline
        self.run_deadline_s = run_deadline_s

    def set(self, reason: str) -> None:
        if not self.event.is_set():
            self.reason = reason
            self.event.set()

    def check(self) -> None:
        """Raise :class:`Cancelled` when the request was abandoned or ran past its run deadline."""
        import time

        if self.event.is_set():
            raise Cancelled(self.reason)
        if self.run_deadline is not None and time.monotonic() > self.run_deadline:
            self.set(f"the request ran past its {self.run_deadline_s:g} s run deadline")
            raise Cancelled(self.reason)


def cancel_of(scope: "Mapping[str, Any]") -> Cancel:
    """The :class:`Cancel` of a request (a fresh, never-set one outside :class:`AdmissionControl`)."""
    c = scope.get("sieve.cancel")
    return c if isinstance(c, Cancel) else Cancel()


class AdmissionControl:
    """ASGI middleware for the work routes (``/v1/filter``, ``/v1/audit``): at most ``workers``
    requests run at once and at most ``queue`` wait; a request that finds the queue full, or would
    wait longer than ``deadline_s`` behind it at the recent run time, is answered ``503`` with
    ``Retry-After`` at once (shed, never left to time out at the client), a queued request waits at
    most ``deadline_s`` (then ``503``), one whose client went away while queued is dropped
    without running, and once the server is shutting down (:meth:`close`) every queued request is
    answered ``503`` so that shutdown takes seconds, not the length of the queue.

    A running request gets a :class:`Cancel` in its scope, set when its client disconnects, when the
    server shuts down, or (``run_deadline_s`` > 0) once it has run that long; the endpoint stops at
    its next safe point (docs/service.md "Cancellation"). Counters: ``shed`` (503 for capacity or
    the queue deadline), ``dropped`` (abandoned while queued, never run)."""

    def __init__(self, app: Any, workers: int = 2, queue: int = 16, deadline_s: float = 10.0,
                 paths: tuple[str, ...] = ("/v1/filter", "/v1/audit"), run_deadline_s: float = 0.0,
                 metrics: Any = None) -> None:
        import asyncio

        self.app, self.paths = app, paths
        self.workers, self.queue, self.deadline_s = max(1, int(workers)), max(0, int(queue)), float(deadline_s)
        self.run_deadline_s = max(0.0, float(run_deadline_s))
        self.metrics = metrics
        self._sem: asyncio.Semaphore | None = None
        self.waiting = 0
        self.running = 0
        self.shed = 0
        self.dropped = 0
        self.closing = False
        #: moving average of the run time of a work request (s): a request that would wait longer than
        #: the deadline behind the queue is shed at once instead of after the deadline
        self.service_s: float | None = None
        self._started: dict[int, float] = {}   # running requests: id → start time (loop clock)
        self._cancels: dict[int, Cancel] = {}  # running requests: id → their cancellation
        ADMISSION.append(self)

    def close(self) -> None:
        """Shutting down: queued requests are answered 503, running ones stop at their next safe point."""
        self.closing = True
        for c in list(self._cancels.values()):
            c.set(Cancel.CLOSING)

    def _count(self, kind: str) -> None:
        if kind == "shed":
            self.shed += 1
        else:
            self.dropped += 1
        if self.metrics is not None and hasattr(self.metrics, "admission"):
            self.metrics.admission(kind)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        import asyncio
        import time

        if scope["type"] != "http" or scope.get("path") not in self.paths:
            await self.app(scope, receive, send)
            return
        if self._sem is None:
            self._sem = asyncio.Semaphore(self.workers)
        if self.closing:
            await _unavailable(send, "the server is shutting down", 1)
            return
        if self.running >= self.workers and self.waiting >= self.queue:
            self._count("shed")
            await _unavailable(send, f"the server is at capacity ({self.workers} running, {self.waiting} queued); "
                                     "retry shortly", 1)
            return
        now = asyncio.get_running_loop().time()
        per = max([self.service_s or 0.0, *(now - t for t in self._started.values())])   # a slow run counts now
        if self.running >= self.workers and per > 0:
            expected = (self.waiting // self.workers + 1) * per
            if expected > self.deadline_s:
                self._count("shed")
                await _unavailable(send, f"the expected wait ({expected:.0f} s behind {self.waiting} queued requests) "
                                         f"exceeds the {self.deadline_s:g} s deadline; retry later",
                                   max(1, int(min(expected, 60))))
                return
        # read the body now (so a disconnect can be noticed while queued), replay it to the app
        chunks: list[bytes] = []
        while True:
            msg = await receive()
            if msg["type"] == "http.disconnect":
                self._count("dropped")
                return
            chunks.append(msg.get("body", b""))
            if not msg.get("more_body", False):
                break
        gone = asyncio.Event()
        cancel = Cancel()

        async def watch() -> None:
            while True:
                m = await receive()
                if m["type"] == "http.disconnect":
                    gone.set()
                    cancel.set(Cancel.GONE)
                    return

        watcher = asyncio.ensure_future(watch())
        self.waiting += 1
        acquire = asyncio.ensure_future(self._sem.acquire())
        try:
            loop = asyncio.get_running_loop()
            end = loop.time() + self.deadline_s
            while not acquire.done():
                if gone.is_set() or self.closing or loop.time() >= end:
                    break
                # wake on the permit, on the client leaving, or every 0.1 s (shutdown, deadline)
                await asyncio.wait({acquire, watcher}, timeout=min(0.1, max(0.0, end - loop.time())),
                                   return_when=asyncio.FIRST_COMPLETED)
        finally:
            self.waiting -= 1
        if not acquire.done() or acquire.cancelled():
            acquire.cancel()
            watcher.cancel()
            if gone.is_set():
                self._count("dropped")       # abandoned while queued: never run
                return
            if self.closing:
                await _unavailable(send, "the server is shutting down", 1)
                return
            self._count("shed")
            await _unavailable(send, f"the request waited {self.deadline_s:g} s in the queue (deadline); "
                                     "retry shortly", 1)
            return
        if gone.is_set() or self.closing:    # got a permit, but nobody waits for the answer any more
            self._sem.release()
            watcher.cancel()
            if gone.is_set():
                self._count("dropped")
            else:
                await _unavailable(send, "the server is shutting down", 1)
            return
        replay = [{"type": "http.request", "body": b"".join(chunks), "more_body": False}]

        async def replayed() -> Message:
            if replay:
                return replay.pop()
            await gone.wait()
            return {"type": "http.disconnect"}

        if self.run_deadline_s > 0:
            cancel.run_deadline, cancel.run_deadline_s = time.monotonic() + self.run_deadline_s, self.run_deadline_s
        self.running += 1
        started = asyncio.get_running_loop().time()
        key = id(replay)
        self._started[key] = started
        self._cancels[key] = cancel
        try:
            scope["sieve.cancel"] = cancel   # in place: the outer middlewares read the route from this scope
            await self.app(scope, replayed, send)
        finally:
            self._started.pop(key, None)
            self._cancels.pop(key, None)
            took = asyncio.get_running_loop().time() - started
            self.service_s = took if self.service_s is None else 0.7 * self.service_s + 0.3 * took
            self.running -= 1
            self._sem.release()
            watcher.cancel()


#: Admission controllers of this process (``sieve.service.__main__`` closes them on SIGTERM).
ADMISSION: list[AdmissionControl] = []


async def _unavailable(send: Send, msg: str, retry_after: int) -> None:
    body = json.dumps({"detail": [{"loc": [], "msg": msg, "type": "unavailable"}]}).encode()
    await send({"type": "http.response.start", "status": 503,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
                            (b"retry-after", str(retry_after).encode())]})
    await send({"type": "http.response.body", "body": body})


# -- defense parameters: checked against the declared types of each defense's __init__ -----------------

def check_params(spec: str, params: dict[str, Any]) -> None:
    """Raise 422 naming ``params.<name>`` when a value does not fit the declared type of the
    parameter (``bool`` only from JSON booleans, ``int`` from integers, ``float`` from numbers, finite;
    a ``str`` from strings) or its range (a numeric parameter whose default is not negative takes no
    negative value). Unknown names are left to the defense (its error lists the valid names)."""
    import math
    import typing

    from sieve.registry import DEFENSES

    for part in spec.split("+"):
        try:
            entry = DEFENSES.entry(part.strip())
        except Exception:  # noqa: BLE001 - unknown names are reported by the caller
            continue
        cls = entry.factory
        init = getattr(cls, "__init__", None)
        if init is None:
            continue
        try:
            hints = typing.get_type_hints(init)
        except Exception:  # noqa: BLE001 - unresolvable annotations: nothing to check
            continue
        import inspect

        sig = inspect.signature(init)
        for name, value in params.items():
            if name not in hints or name not in sig.parameters:
                continue
            default = sig.parameters[name].default
            err = _type_error(hints[name], value, default, math)
            if err:
                raise limit_error(["body", "params", name], f"params.{name}: {err}; got {json.dumps(value)}",
                                  kind="type_error")


#: The largest magnitude of an integer parameter (2**53: exact as a JSON number and as a float).
MAX_PARAM_INT = 2 ** 53


def params_loc(msg: str, params: dict[str, Any]) -> list[Any]:
    """The ``loc`` of a defense's own error about ``params``: ``["body", "params", name]`` when the
    message names exactly one of the given parameters (or an unknown one, ``unknown parameter
    'x'``), else ``["body", "params"]``."""
    import re

    m = re.search(r"unknown parameter '([^']+)'", msg)
    if m:
        return ["body", "params", m.group(1)]
    named = [k for k in params if re.search(rf"(?<![\w.]){re.escape(k)}(?!\w)", msg)]
    return ["body", "params", named[0]] if len(named) == 1 else ["body", "params"]


def _type_error(hint: Any, value: Any, default: Any, math: Any) -> str | None:
    import collections.abc
    import typing

    origin = typing.get_origin(hint)
    args = typing.get_args(hint)
    if origin is typing.Union or str(origin) == "<class 'types.UnionType'>":
        if value is None and type(None) in args:
            return None
        options = [a for a in args if a is not type(None)]
        errs = [_type_error(a, value, default, math) for a in options]
        return None if any(e is None for e in errs) else errs[0]
    if origin is typing.Literal:
        return None if value in args else f"must be one of {', '.join(json.dumps(a) for a in args)}"
    if origin in (list, tuple, collections.abc.Sequence) and hint is not str:
        item = args[0] if args else None
        if isinstance(value, str):   # a comma-separated string is a sequence of names too ("l2,rsq")
            return None if item in (None, str, Any) else "must be a JSON array"
        if not isinstance(value, list):
            return "must be a JSON array"
        if item is not None and item is not Any and item is not Ellipsis:
            for j, v in enumerate(value):
                err = _type_error(item, v, None, math)
                if err:
                    return f"item {j} {err}"
        return None
    if hint is bool:
        return None if isinstance(value, bool) else "must be a JSON boolean (true or false)"
    if hint is int:
        if isinstance(value, bool) or not isinstance(value, int):
            return "must be an integer"
        if abs(value) > MAX_PARAM_INT:
            return f"must be between -{MAX_PARAM_INT} and {MAX_PARAM_INT}"
        return _range(value, default)
    if hint is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            return "must be a number"
        if isinstance(value, int) and abs(value) > MAX_PARAM_INT:
            return f"must be between -{MAX_PARAM_INT} and {MAX_PARAM_INT}"
        if not math.isfinite(float(value)):
            return "must be finite"
        return _range(value, default)
    if hint is str:
        return None if isinstance(value, str) else "must be a string"
    return None


def _range(value: float, default: Any) -> str | None:
    if isinstance(default, (int, float)) and not isinstance(default, bool) and default >= 0 and value < 0:
        return "must be >= 0"
    return None


class LRUDefenses(dict[Any, Any]):
    """The prepared-defense cache of the service, bounded: at most ``size`` prepared (spec, params)
    entries besides the ``pinned`` ones (the ``--preload`` defenses); the least recently used is
    dropped (prepared again on its next request)."""

    def __init__(self, size: int, pinned: set[Any] | None = None) -> None:
        super().__init__()
        self.size = max(1, int(size))
        self.pinned: set[Any] = set(pinned or ())
        self._order: list[Any] = []

    def get(self, key: Any, default: Any = None) -> Any:
        if key in self:
            self._touch(key)
        return super().get(key, default)

    def __setitem__(self, key: Any, value: Any) -> None:
        super().__setitem__(key, value)
        self._touch(key)
        free = [k for k in self._order if k not in self.pinned]
        while len(free) > self.size:
            old = free.pop(0)
            self._order.remove(old)
            super().pop(old, None)

    def _touch(self, key: Any) -> None:
        if key in self._order:
            self._order.remove(key)
        self._order.append(key)
