"""Schema-based tests: schemathesis generates requests from the served OpenAPI document and checks
that every answer conforms to it (status codes, content types, response bodies) and that the
service never answers 5xx — valid and invalid inputs alike. Tiny models, a temporary ledger."""
from __future__ import annotations

import pytest

schemathesis = pytest.importorskip("schemathesis")
from hypothesis import HealthCheck, settings  # noqa: E402
from schemathesis.specs.openapi.checks import positive_data_acceptance  # noqa: E402

from sieve.service import Limits, ServiceState, create_app  # noqa: E402


def _app():
    import tempfile
    from pathlib import Path

    from sieve.corpus import load_dataset
    from sieve.experiment import Experiment
    from sieve.testing_models import tiny_resources

    ds = load_dataset(Path(__file__).resolve().parents[2] / "demo_data")
    ledger = Path(tempfile.mkdtemp(prefix="sieve-schema-")) / "ledger.sqlite"
    exp = Experiment(ds, tiny_resources(corpus_texts=[d.text for d in ds.documents]), ledger_path=ledger,
                     quarantine="open_and_confirmed")
    st = ServiceState.build(exp, ledger_path=ledger, clean_limit=10,
                            limits=Limits(max_body_bytes=100_000, max_documents=25, max_text_chars=2_000))
    st.warm(["tris"])
    return create_app(st)


APP = _app()
schema = schemathesis.openapi.from_asgi("/openapi.json", APP).exclude(path="/v1/audit")


@schema.parametrize()
@settings(max_examples=15, deadline=None, suppress_health_check=list(HealthCheck))
def test_api_conforms_to_its_schema(case):
    # "schema-valid request rejected" is not checked: an unknown defense name, an unknown
    # parameter or a request over the server's limits is valid for the schema (which must not
    # change with the registry or the server's configuration) and rightly answered 422.
    case.call_and_validate(excluded_checks=[positive_data_acceptance])


def test_schema_covers_every_route():
    paths = set(APP.openapi()["paths"])
    assert {"/v1/filter", "/v1/audit", "/v1/alerts", "/v1/alerts/{alert_id}/confirm", "/v1/alerts/{alert_id}/dismiss",
            "/v1/alerts/{alert_id}/rollback", "/v1/quarantine", "/healthz", "/metrics", "/v1/defenses"} <= paths
