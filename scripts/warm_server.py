"""Open one dashboard session on a running server and run its default pages once, as a browser would,
so that the server process holds the loaded models, the demo's experiment and the prepared default
defenses (``st.cache_resource``, shared by every session) before ``scripts/demo.sh`` prints the URL.

    .venv/bin/python scripts/warm_server.py http://127.0.0.1:8501 [PAGE ...]   # default: explorer attack-lab

One progress line per page; exit code 0 also when a page could not be warmed (the first visitor then
pays for it and the page says what it is preparing).
"""
from __future__ import annotations

import sys
import time


def warm_page(url: str, page: str, timeout: float = 900.0) -> tuple[bool, str]:
    """Run ``page`` in a fresh session over Streamlit's websocket; (finished, note)."""
    import websocket
    from streamlit.proto.BackMsg_pb2 import BackMsg
    from streamlit.proto.ForwardMsg_pb2 import ForwardMsg

    ws_url = url.replace("http://", "ws://").replace("https://", "wss://").rstrip("/") + "/_stcore/stream"
    ws = websocket.create_connection(ws_url, timeout=timeout, subprotocols=["streamlit"],
                                     origin=url.rstrip("/"))
    try:
        msg = BackMsg()
        msg.rerun_script.page_name = page
        msg.rerun_script.query_string = ""
        ws.send_binary(msg.SerializeToString())
        deadline = time.time() + timeout
        while time.time() < deadline:
            raw = ws.recv()
            if not isinstance(raw, bytes):
                continue
            fwd = ForwardMsg()
            fwd.ParseFromString(raw)
            kind = fwd.WhichOneof("type")
            if kind == "page_not_found":
                return False, "page not found"
            if kind == "script_finished":
                if fwd.script_finished == ForwardMsg.FINISHED_SUCCESSFULLY:
                    # a first session may rerun once (legacy page-directory mode → app.py's router)
                    ws.settimeout(3.0)
                    try:
                        while True:
                            raw = ws.recv()
                            if isinstance(raw, bytes):
                                fwd.ParseFromString(raw)
                                if fwd.WhichOneof("type") == "script_finished":
                                    ws.settimeout(3.0)
                    except websocket.WebSocketTimeoutException:
                        return True, ""
                if fwd.script_finished == ForwardMsg.FINISHED_WITH_COMPILE_ERROR:
                    return False, "compile error"
        return False, "timed out"
    finally:
        ws.close()


def main(argv: list[str]) -> int:
    if not argv:
        print(__doc__)
        return 2
    url, pages = argv[0], argv[1:] or ["explorer", "attack-lab"]
    for i, page in enumerate(pages, 1):
        t0 = time.perf_counter()
        try:
            ok, note = warm_page(url, page)
        except Exception as e:  # noqa: BLE001 - reported; the first visitor warms it instead
            ok, note = False, f"{type(e).__name__}: {e}"
        print(f"[server {i}/{len(pages)}] page {page}: {time.perf_counter() - t0:.1f} s"
              + ("" if ok else f" (not warmed: {note})"), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
