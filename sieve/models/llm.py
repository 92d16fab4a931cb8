"""Generator / TRIS L3 verifier clients (protocol :class:`~sieve.models.protocols.LLMClient`).

* :class:`OpenAIChatClient` — any OpenAI-compatible ``/v1/chat/completions`` endpoint (prompted
  L3 with a JSON verdict, docs/design.md). No likelihoods: ``supports_nll`` is False.
* :class:`LocalLLM` — the packaged local model (Qwen2.5-Coder-0.5B-Instruct by default), greedy;
  ``nll`` is the likelihood verifier of docs/models.md (mean answer NLL given context).

The API key is only ever sent in the Authorization header; it never appears in errors or reprs.

Degraded runs say so: both clients count their calls and failures (``n_calls``,
``n_errors``; :meth:`health`), which ``sieve eval`` records per defense (``n_llm_errors`` in
summary.json). :class:`OpenAIChatClient` has a circuit breaker: after ``breaker_failures``
consecutive failed attempts (HTTP 5xx/429, malformed reply, timeout, refused connection) it stops
calling the endpoint for ``breaker_cooldown_s`` seconds and fails every call at once (callers fail
open per document, as before); after the cooldown one probe attempt decides whether it closes.
"""
from __future__ import annotations

import threading
import time
from typing import Any

from sieve.models.errors import LLMError

#: Consecutive failed attempts that open the circuit breaker (a stalled endpoint then costs at most
#: this many timeouts, not every query's retries).
BREAKER_FAILURES = 3
#: Seconds the open breaker refuses calls before one probe attempt.
BREAKER_COOLDOWN_S = 60.0


class _Counted:
    """Call / error counters shared by the LLM clients (read by the evaluation runner)."""

    n_calls: int = 0
    n_errors: int = 0
    n_short_circuited: int = 0
    last_error: str = ""

    def _count(self, error: str | None, short_circuit: bool = False) -> None:
        self.n_calls += 1
        if error is not None:
            self.n_errors += 1
            if short_circuit:
                self.n_short_circuited += 1
            else:   # the last real endpoint failure (a refused call repeats it, never nests it)
                self.last_error = error

    def health(self) -> dict[str, Any]:
        """Counters since the client was created (calls, errors, calls refused by the breaker)."""
        return {"calls": self.n_calls, "errors": self.n_errors, "short_circuited": self.n_short_circuited,
                "last_error": self.last_error, "circuit_open": bool(getattr(self, "circuit_open", False))}


class OpenAIChatClient(_Counted):
    supports_nll = False

    def __init__(self, base_url: str, model: str, api_key: str | None = None, timeout_s: float = 30.0,
                 retries: int = 2, backoff_s: float = 0.5, breaker_failures: int = BREAKER_FAILURES,
                 breaker_cooldown_s: float = BREAKER_COOLDOWN_S):
        import openai

        if int(breaker_failures) < 1:
            raise ValueError(f"breaker_failures must be >= 1, got {breaker_failures}")
        self.breaker_failures = int(breaker_failures)
        self.breaker_cooldown_s = float(breaker_cooldown_s)
        self.consecutive_failures = 0
        self._opened_at: float | None = None
        self._lock = threading.Lock()

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

    # -- circuit breaker ----------------------------------------------------------------------
    @property
    def circuit_open(self) -> bool:
        """True while the breaker refuses calls (until the cooldown ends)."""
        with self._lock:
            return self._opened_at is not None and time.monotonic() - self._opened_at < self.breaker_cooldown_s

    def _attempt_failed(self) -> None:
        with self._lock:
            self.consecutive_failures += 1
            if self.consecutive_failures >= self.breaker_failures:
                self._opened_at = time.monotonic()

    def _attempt_ok(self) -> None:
        with self._lock:
            self.consecutive_failures = 0
            self._opened_at = None

    def _fail(self, message: str, short_circuit: bool = False) -> LLMError:
        msg = self._scrub(message)
        self._count(msg, short_circuit)
        return LLMError(msg)

    def generate(self, prompt: str, system: str | None = None, max_tokens: int = 128,
                 temperature: float = 0.0, json_mode: bool = False) -> str:
        """One chat completion (see :meth:`_generate`), counted; refused at once while the circuit
        breaker is open."""
        if self.circuit_open:
            raise self._fail(f"circuit breaker open after {self.consecutive_failures} consecutive failures, "
                             f"endpoint not called (last failure: {self.last_error or 'unknown'})",
                             short_circuit=True)
        try:
            out = self._generate(prompt, system, max_tokens, temperature, json_mode)
        except LLMError as e:
            raise self._fail(str(e)) from None
        self._count(None)
        return out

    def _generate(self, prompt: str, system: str | None, max_tokens: int, temperature: float,
                  json_mode: bool) -> str:
        """One chat completion; retries transport errors, timeouts, HTTP 429/5xx with exponential
        backoff (``retries`` extra attempts); anything else or an empty reply → :class:`LLMError`."""
        import openai

        messages = ([{"role": "system", "content": system}] if system else []) + [{"role": "user", "content": prompt}]
        kwargs: dict[str, Any] = {"model": self.model, "messages": messages, "max_tokens": max_tokens,
                                  "temperature": temperature}
        if json_mode:
            kwargs["response_format"] = {"type": "json_object"}
        last = "no attempt made"
        attempts = 0
        for attempt in range(self.retries + 1):
            if attempt:
                if self.circuit_open:   # the breaker opened during this call's retries: stop now
                    break
                time.sleep(self.backoff_s * (2 ** (attempt - 1)))
            attempts += 1
            try:
                resp = self._client.chat.completions.create(**kwargs)
            except openai.APITimeoutError:
                last = f"timed out after {self.timeout_s:g} s"
                self._attempt_failed()
                continue
            except openai.APIConnectionError as e:
                last = f"connection failed ({type(e).__name__})"
                self._attempt_failed()
                continue
            except openai.APIStatusError as e:
                last = f"HTTP {e.status_code}"
                if e.status_code == 429 or e.status_code >= 500:
                    self._attempt_failed()
                    continue
                self._attempt_ok()   # the endpoint answered; the request itself was refused
                raise LLMError(self._scrub(f"LLM endpoint {self.base_url} refused the request: {last}")) from None
            except Exception as e:  # noqa: BLE001 - malformed body, validation errors
                self._attempt_failed()
                raise LLMError(self._scrub(
                    f"LLM endpoint {self.base_url} returned an unreadable response ({type(e).__name__})")) from None
            try:
                content = resp.choices[0].message.content
            except (AttributeError, IndexError, TypeError):
                self._attempt_failed()
                raise LLMError(f"LLM endpoint {self.base_url} returned a malformed response (no choices)") from None
            if not isinstance(content, str) or not content.strip():
                self._attempt_failed()
                raise LLMError(f"LLM endpoint {self.base_url} returned an empty reply")
            self._attempt_ok()
            return content
        raise LLMError(self._scrub(
            f"LLM endpoint {self.base_url} failed after {attempts} attempt(s): {last}"))

    def nll(self, answer: str, context: str) -> float:
        raise LLMError(f"{self.model_id} cannot score likelihoods (chat endpoint); use the prompted verifier")


class LocalLLM(_Counted):
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
            out = self.lm.generate(prompt, system=system, max_new_tokens=max_tokens)
        except LLMError as e:
            self._count(str(e))
            raise
        except Exception as e:   # re-raised as LLMError: a model failure must fail open upstream, not crash
            msg = f"local model {self.name} failed to generate: {type(e).__name__}: {e}"
            self._count(msg)
            raise LLMError(msg) from e
        self._count(None)
        return out

    def nll(self, answer: str, context: str) -> float:
        try:
            out = float(self.lm.answer_nll(answer, context))
        except Exception as e:   # re-raised as LLMError
            msg = f"local model {self.name} failed to score: {type(e).__name__}: {e}"
            self._count(msg)
            raise LLMError(msg) from e
        self._count(None)
        return out
