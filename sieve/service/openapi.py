"""Print the OpenAPI schema of ``sieve serve`` (committed as docs/openapi.json; a test checks that
the served schema equals it):

    python -m sieve.service.openapi > docs/openapi.json
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any


def schema() -> dict[str, Any]:
    """The schema; it does not depend on the dataset, limits or token the server runs with."""
    from sieve.service.app import ServiceState, create_app

    return create_app(ServiceState(experiment=None, filter=None, ledger_path=Path("."))).openapi()  # type: ignore[arg-type]


if __name__ == "__main__":
    print(json.dumps(schema(), indent=2, sort_keys=True))
