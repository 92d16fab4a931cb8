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
        scheme, _, given = (authorization or "").partition(" ")
        if scheme.lower() != "bearer" or not hmac.compare_digest(given.strip().encode(), token.encode()):
            raise HTTPException(401, detail="missing or wrong bearer token (header 'Authorization: Bearer <token>')",
                                headers={"WWW-Authenticate": "Bearer"})

    return check
