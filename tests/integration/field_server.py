"""A loopback inference server that serves a real ``/metrics`` body from ``tests/data/metrics`` (TGI's,
llama.cpp's) and a ``/health`` of 200, its counters growing at each ``/metrics`` read by what the test sets.

The body is the recorded one; only the values of the named lines change, so what gputui reads is the field's
format, names and labels. It runs on a thread of the test's process and stops with :meth:`close`.
"""

from __future__ import annotations

import re
import threading
from pathlib import Path
from typing import Any

from tests.integration.httpserver import QuietHandler, QuietServer

DATA = Path(__file__).resolve().parents[1] / "data" / "metrics"


class FieldServer:
    """``name`` (a file of ``tests/data/metrics``) served on loopback.

    Args:
        name: The body's file.
        counters: Sample line prefix (the line up to its value) -> its value now; each grows by
            ``per_scrape[prefix]`` at every ``/metrics`` read.
        gauges: Sample line prefix -> its value (request gauges).
    """

    def __init__(self, name: str, counters: dict[str, float], gauges: dict[str, float]) -> None:
        self.template = (DATA / name).read_text()
        for prefix in (*counters, *gauges):
            assert re.search(rf"^{re.escape(prefix)} ", self.template, re.M), prefix
        self.counters = dict(counters)
        self.gauges = dict(gauges)
        self.per_scrape = dict.fromkeys(counters, 0.0)
        self.lock = threading.Lock()
        self.server = QuietServer(("127.0.0.1", 0), self._handler())
        self.thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05})
        self.thread.start()
        self.port = self.server.server_address[1]

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    def set(self, per_scrape: dict[str, float] | None = None, gauges: dict[str, float] | None = None) -> None:
        with self.lock:
            self.per_scrape.update(per_scrape or {})
            self.gauges.update(gauges or {})

    def body(self) -> bytes:
        with self.lock:
            for prefix, step in self.per_scrape.items():
                self.counters[prefix] += step
            values = {**self.counters, **self.gauges}
        text = self.template
        for prefix, value in values.items():
            text = re.sub(rf"^({re.escape(prefix)}) \S+$", rf"\g<1> {value!r}", text, flags=re.M)
        return text.encode()

    def _handler(self) -> type[QuietHandler]:
        outer = self

        class Handler(QuietHandler):
            def do_GET(self) -> None:  # noqa: N802 - the base class's name
                path = self.path.split("?", 1)[0]
                body = outer.body() if path == "/metrics" else b"" if path == "/health" else None
                self.send_response(404 if body is None else 200)
                self.send_header("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
                self.send_header("Content-Length", str(len(body or b"")))
                self.end_headers()
                self.wfile.write(body or b"")

            def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base class's name
                pass

        return Handler

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(10)
