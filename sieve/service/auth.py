"""Optional bearer token for ``sieve serve``: when ``SIEVE_API_TOKEN`` (or ``--token-env``) is set,
every route except ``GET /healthz`` needs ``Authorization: Bearer <token>``; else 401."""
from __future__ import annotations

import hmac
from typing import Callable, Optional

from fastapi import Header, HTTPException

TOKEN_ENV = "SIEVE_API_TOKEN"


def bearer_guard(token: Optional[str]) -> Callable[..., None]:
    """A FastAPI dependency checking the bearer token (no-op when ``token`` is empty)."""

    def check(authorization: Optional[str] = Header(None, include_in_schema=False)) -> None:
        if not token:
            return
        if not token_ok(token, authorization):
            raise HTTPException(401, detail="missing or wrong bearer token (header 'Authorization: Bearer <token>')",
                                headers={"WWW-Authenticate": "Bearer"})

    return check


def token_ok(token: str, authorization: Optional[str]) -> bool:
    """True when ``authorization`` is ``Bearer <token>`` (constant-time comparison)."""
    scheme, _, given = (authorization or "").partition(" ")
    return scheme.lower() == "bearer" and hmac.compare_digest(given.strip().encode(), token.encode())
