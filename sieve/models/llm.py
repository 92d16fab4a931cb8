"""Generator / TRIS L3 verifier clients (protocol :class:`~sieve.models.protocols.LLMClient`).

* :class:`OpenAIChatClient` — any OpenAI-compatible ``/v1/chat/completions`` endpoint (prompted
  L3 with a JSON verdict, docs/design.md). No likelihoods: ``supports_nll`` is False.
* :class:`LocalLLM` — the packaged local model (Qwen2.5-Coder-0.5B-Instruct by default), greedy;
  ``nll`` is the likelihood verifier of docs/models.md (mean answer NLL given context).

The API key is only ever sent in the Authorization header; it never appears in errors or reprs.
"""
from __future__ import annotations

import time
from typing import Any

from sieve.models.errors import LLMError


class OpenAIChatClient:
    supports_nll = False

    def __init__(self, base_url: str, model: str, api_key: str | None = None, timeout_s: float = 30.0,
                 retries: int = 2, backoff_s: float = 0.5):
        import openai

        self.base_url = base_url.rstrip("/")
        self.model = model
        self.model_id = f"openai:{model}@{self.base_url}"
        self.timeout_s = float(timeout_s)
        self.retries = int(retries)
        self.backoff_s = float(backoff_s)
        self._key = api_key or "unused"
        self._client = openai.OpenAI(base_url=self.base_url, api_key=self._key,
                                     timeout=self.timeout_s, max_retries=0)

    def __repr__(self) -> str:
        return f"OpenAIChatClient(base_url={self.base_url!r}, model={self.model!r})"

    def _scrub(self, text: str) -> str:
        return text.replace(self._key, "***") if self._key and self._key != "unused" else text

    def generate(self, prompt: str, system: str | None = None, max_tokens: int = 128,
                 temperature: float = 0.0, json_mode: bool = False) -> str:
        """One chat completion; retries transport errors, timeouts, HTTP 429/5xx with exponential
        backoff (``retries`` extra attempts); anything else or an empty reply → :class:`LLMError`."""
        import openai

        messages = ([{"role": "system", "content": system}] if system else []) + [{"role": "user", "content": prompt}]
        kwargs: dict[str, Any] = {"model": self.model, "messages": messages, "max_tokens": max_tokens,
                                  "temperature": temperature}
        if json_mode:
            kwargs["response_format"] = {"type": "json_object"}
        last = "no attempt made"
        for attempt in range(self.retries + 1):
            if attempt:
                time.sleep(self.backoff_s * (2 ** (attempt - 1)))
            try:
                resp = self._client.chat.completions.create(**kwargs)
            except openai.APITimeoutError:
                last = f"timed out after {self.timeout_s:g} s"
                continue
            except openai.APIConnectionError as e:
                last = f"connection failed ({type(e).__name__})"
                continue
            except openai.APIStatusError as e:
                last = f"HTTP {e.status_code}"
                if e.status_code == 429 or e.status_code >= 500:
                    continue
                raise LLMError(self._scrub(f"LLM endpoint {self.base_url} refused the request: {last}")) from None
            except Exception as e:  # malformed body, validation errors
                raise LLMError(self._scrub(
                    f"LLM endpoint {self.base_url} returned an unreadable response ({type(e).__name__})")) from None
            try:
                content = resp.choices[0].message.content
            except (AttributeError, IndexError, TypeError):
                raise LLMError(f"LLM endpoint {self.base_url} returned a malformed response (no choices)") from None
            if not isinstance(content, str) or not content.strip():
                raise LLMError(f"LLM endpoint {self.base_url} returned an empty reply")
            return content
        raise LLMError(self._scrub(
            f"LLM endpoint {self.base_url} failed after {self.retries + 1} attempt(s): {last}"))

    def nll(self, answer: str, context: str) -> float:
        raise LLMError(f"{self.model_id} cannot score likelihoods (chat endpoint); use the prompted verifier")


class LocalLLM:
    """The packaged local model as an LLM client: greedy chat generation and likelihood scoring.

    ``temperature`` is ignored (always greedy, reproducible) and ``json_mode`` cannot be enforced
    locally (the prompt must ask for JSON). Model failures surface as :class:`LLMError`.
    """

    supports_nll = True

    def __init__(self, lm: Any, name: str):
        self.lm = lm
        self.name = name
        self.model_id = f"local:{name}"

    def __repr__(self) -> str:
        return f"LocalLLM({self.model_id!r})"

    def generate(self, prompt: str, system: str | None = None, max_tokens: int = 128,
                 temperature: float = 0.0, json_mode: bool = False) -> str:
        try:
            return self.lm.generate(prompt, system=system, max_new_tokens=max_tokens)
        except LLMError:
            raise
        except Exception as e:  # noqa: BLE001 - a model failure must fail open upstream, not crash
            raise LLMError(f"local model {self.name} failed to generate: {type(e).__name__}: {e}") from e

    def nll(self, answer: str, context: str) -> float:
        try:
            return float(self.lm.answer_nll(answer, context))
        except Exception as e:  # noqa: BLE001
            raise LLMError(f"local model {self.name} failed to score: {type(e).__name__}: {e}") from e
