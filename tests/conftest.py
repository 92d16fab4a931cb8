"""Shared fixtures.

Tiny in-process models (milliseconds) for unit tests; session-scoped *real* packaged models
(loaded once per test session, caches under the user cache dir) for the tests marked
``realmodel``. Real-model tests run in CI too.
"""
from __future__ import annotations

import os

import pytest

from sieve.runtime import configure_process_environment

configure_process_environment()   # as Sieve's programs run (offline switches; OMP_WAIT_POLICY before torch)

try:  # property tests: random exploration locally, a fixed reproducible sample in CI (a landing never flakes)
    from hypothesis import settings as _hsettings

    _hsettings.register_profile("ci", derandomize=True, print_blob=True)
    if os.environ.get("CI"):
        _hsettings.load_profile("ci")
except ImportError:  # pragma: no cover - hypothesis is in the test extra
    pass

from sieve.config import SieveConfig  # noqa: E402
from sieve.models.tiny import HashingEmbedder, HashingTokenEncoder, UnigramLM  # noqa: E402


@pytest.fixture
def tiny_embedder() -> HashingEmbedder:
    return HashingEmbedder(dim=64)


@pytest.fixture
def tiny_judge() -> HashingEmbedder:
    return HashingEmbedder(dim=48, model_id="tiny-judge")


@pytest.fixture
def tiny_token_encoder() -> HashingTokenEncoder:
    return HashingTokenEncoder()


@pytest.fixture
def tiny_lm() -> UnigramLM:
    return UnigramLM(["the capital of france is paris", "paris is a city in france"])


@pytest.fixture
def tiny_resources(tiny_embedder, tiny_judge, tiny_lm, tiny_token_encoder):
    from sieve.resources import Resources

    return Resources(retriever=tiny_embedder, judge=tiny_judge, lm=tiny_lm,
                     token_encoder=tiny_token_encoder, llm=None)


# ---- real packaged models: one load per test session -------------------------------------------
@pytest.fixture(scope="session")
def real_config() -> SieveConfig:
    return SieveConfig().validate()


@pytest.fixture(scope="session")
def real_retriever(real_config):
    from sieve.models import load_embedder

    return load_embedder("all-mpnet-base-v2", real_config)


@pytest.fixture(scope="session")
def real_judge(real_config):
    from sieve.models import load_embedder

    return load_embedder("all-MiniLM-L6-v2", real_config)


@pytest.fixture(scope="session")
def real_lm(real_config):
    from sieve.models import load_causal_lm

    return load_causal_lm("smollm2-135m", real_config)


@pytest.fixture(scope="session")
def real_token_encoder(real_config):
    """The default BERTScore encoder (config.models.token_encoder / token_encoder_layer)."""
    from sieve.models import load_token_encoder

    m = real_config.models
    return load_token_encoder(m.token_encoder, m.token_encoder_layer, real_config)


@pytest.fixture(scope="session")
def real_llm(real_config):
    """The local generator (Qwen2.5-Coder-0.5B-Instruct) — dequantised once into the cache."""
    from sieve.models import load_llm

    return load_llm(real_config)


@pytest.fixture(scope="session")
def real_resources(real_config, real_retriever, real_judge, real_lm, real_token_encoder):
    from sieve.resources import Resources

    return Resources(real_config, retriever=real_retriever, judge=real_judge, lm=real_lm,
                     token_encoder=real_token_encoder)
