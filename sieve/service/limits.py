"""Request limits of ``sieve serve``: body bytes (413), document count and text lengths (422).

Every answer names the offending field, in FastAPI's error shape
``{"detail": [{"loc": [...], "msg": ..., "type": ...}]}``.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Awaitable, Callable

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

    def check_filter(self, query: str, texts: list[str]) -> None:
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
