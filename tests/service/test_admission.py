"""The admission queue of ``sieve serve`` (sieve/service/limits.py, docs/service.md "Under load and faults"):
driven directly over ASGI with an app that blocks until the test releases it, so the outcomes are
decided by events, not by timing: a full queue is answered 503 + Retry-After before any work, a
request past its queue deadline is 503 and never runs, a request abandoned while queued is dropped
unrun, and a running request whose client leaves (or whose server shuts down) sees its
cancellation at the next safe point."""
from __future__ import annotations

import asyncio
import json
from typing import Any

from sieve.service.limits import AdmissionControl, Cancel, Cancelled, cancel_of


class BlockingApp:
    """Answers 200 once ``release`` is set; records which requests ran and what their cancel said."""

    def __init__(self) -> None:
        self.release = asyncio.Event()
        self.ran: list[str] = []
        self.cancelled: dict[str, str] = {}
        self.entered = asyncio.Event()

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        body = json.loads((await receive())["body"] or b"{}")
        name = body.get("name", "?")
        self.ran.append(name)
        self.entered.set()
        cancel = cancel_of(scope)
        while not self.release.is_set():        # a "safe point" every 10 ms, as an endpoint's checks
            try:
                cancel.check()
            except Cancelled as e:
                self.cancelled[name] = e.reason
                break
            await asyncio.sleep(0.01)
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"ok"})


class Client:
    """One request: its receive() can be told to report a disconnect; its answer is collected."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.leave = asyncio.Event()
        self.sent_body = False
        self.status: int | None = None
        self.headers: dict[bytes, bytes] = {}
        self.done = asyncio.Event()

    async def receive(self) -> dict[str, Any]:
        if not self.sent_body:
            self.sent_body = True
            return {"type": "http.request", "body": json.dumps({"name": self.name}).encode(), "more_body": False}
        await self.leave.wait()
        return {"type": "http.disconnect"}

    async def send(self, msg: dict[str, Any]) -> None:
        if msg["type"] == "http.response.start":
            self.status = msg["status"]
            self.headers = dict(msg.get("headers", []))

    async def run(self, adm: AdmissionControl) -> None:
        await adm({"type": "http", "path": "/v1/filter", "method": "POST", "headers": []}, self.receive, self.send)
        self.done.set()


async def _until(pred, limit: float = 30.0) -> None:
    """Wait for ``pred()`` (a hang guard, not a timing claim)."""
    loop = asyncio.get_running_loop()
    end = loop.time() + limit
    while not pred():
        assert loop.time() < end, "condition never became true"
        await asyncio.sleep(0.005)


def test_full_queue_is_shed_at_once_and_the_deadline_answers_503_unrun():
    async def scenario() -> None:
        app = BlockingApp()
        adm = AdmissionControl(app, workers=1, queue=1, deadline_s=0.5)
        first, second, third = Client("first"), Client("second"), Client("third")
        t1 = asyncio.ensure_future(first.run(adm))
        await app.entered.wait()
        t2 = asyncio.ensure_future(second.run(adm))
        await _until(lambda: adm.waiting == 1)
        await third.run(adm)                             # the queue is full: answered before anything else
        assert third.status == 503 and third.headers[b"retry-after"]
        assert not second.done.is_set() and app.ran == ["first"]
        await t2                                         # waits its 0.5 s deadline, then 503, never run
        assert second.status == 503 and second.headers[b"retry-after"]
        assert app.ran == ["first"]
        app.release.set()
        await t1
        assert first.status == 200
        assert (adm.shed, adm.dropped) == (2, 0)

    asyncio.run(scenario())


def test_a_request_abandoned_in_the_queue_never_runs():
    async def scenario() -> None:
        app = BlockingApp()
        adm = AdmissionControl(app, workers=1, queue=4, deadline_s=60)
        first, gone, later = Client("first"), Client("gone"), Client("later")
        t1 = asyncio.ensure_future(first.run(adm))
        await app.entered.wait()
        tg = asyncio.ensure_future(gone.run(adm))
        tl = asyncio.ensure_future(later.run(adm))
        await _until(lambda: adm.waiting == 2)
        gone.leave.set()                                 # the client disconnects while queued
        await tg
        assert gone.status is None and adm.dropped == 1
        app.release.set()
        await asyncio.gather(t1, tl)
        assert app.ran == ["first", "later"]             # "gone" never ran
        assert first.status == later.status == 200

    asyncio.run(scenario())


def test_a_running_request_sees_its_client_leave_and_the_shutdown():
    async def scenario() -> None:
        app = BlockingApp()
        adm = AdmissionControl(app, workers=2, queue=4, deadline_s=60)
        left, stays, queued = Client("left"), Client("stays"), Client("queued")
        ta = asyncio.ensure_future(left.run(adm))
        tb = asyncio.ensure_future(stays.run(adm))
        await _until(lambda: adm.running == 2)
        tq = asyncio.ensure_future(queued.run(adm))
        await _until(lambda: adm.waiting == 1)
        left.leave.set()                                 # its client goes away while it runs
        await _until(lambda: "left" in app.cancelled)
        assert app.cancelled["left"] == Cancel.GONE and "stays" not in app.cancelled
        await ta
        await _until(lambda: "queued" in app.ran)        # the freed worker takes the queued request
        adm.close()                                      # SIGTERM: running requests stop at their next check
        await asyncio.gather(tb, tq)
        assert app.cancelled["stays"] == app.cancelled["queued"] == Cancel.CLOSING
        late = Client("late")
        await late.run(adm)                              # after close: 503 at once
        assert late.status == 503 and "late" not in app.ran

    asyncio.run(scenario())


def test_a_running_request_past_its_run_deadline_is_cancelled():
    async def scenario() -> None:
        app = BlockingApp()
        adm = AdmissionControl(app, workers=1, queue=0, deadline_s=60, run_deadline_s=0.2)
        c = Client("slow")
        await c.run(adm)                                 # the app never gets released: the run deadline stops it
        assert "run deadline" in app.cancelled["slow"]

    asyncio.run(scenario())
