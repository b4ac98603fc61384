"""An sglang-shaped launcher, wedged: ``python -m sglang.launch_server --port P`` whose /health answers 503
while its scheduler (the defunct-leader program: main thread gone, a worker thread in D, an unreaped child)
holds GPU memory, as the seed incident had it.

The module is written into a directory of its own and run with ``PYTHONPATH`` pointing there, so its
command line is the real launcher's and the collector discovers its endpoint (and its pid and age) as it
would a real one. It reports {"role", "pid"} lines on stdout; the scheduler's own lines come through the
same pipe.
"""

from __future__ import annotations

import os
import socket
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from tests.integration._procs import Script

LAUNCHER = r"""
import json, os, subprocess, sys, threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

port = int(sys.argv[sys.argv.index("--port") + 1])


class Health(BaseHTTPRequestHandler):
    def do_GET(self):
        body = b"scheduler not responding"
        self.send_response(503 if self.path == "/health" else 404)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


server = ThreadingHTTPServer(("127.0.0.1", port), Health)
threading.Thread(target=server.serve_forever, daemon=True).start()
os.write(1, (json.dumps({"role": "launcher", "pid": os.getpid()}) + "\n").encode())
scheduler = subprocess.Popen([os.environ["WEDGED_SCHEDULER"], "vfork"], stdin=subprocess.DEVNULL)
scheduler.wait()
"""

ROLES = ("launcher", "leader", "zombie", "worker")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def install(directory: Path) -> Path:
    """Write the ``sglang.launch_server`` module under ``directory``; returns it (the PYTHONPATH)."""
    package = directory / "sglang"
    package.mkdir(parents=True, exist_ok=True)
    (package / "__init__.py").write_text("")
    (package / "launch_server.py").write_text(LAUNCHER)
    return directory


@contextmanager
def wedged_launcher(module_dir: Path, scheduler: Path, port: int) -> Iterator[Script]:
    """The launcher running on ``port`` with the defunct-leader ``scheduler`` under it; killed (its whole
    session) on the way out."""
    saved = {k: os.environ.get(k) for k in ("PYTHONPATH", "WEDGED_SCHEDULER")}
    os.environ["PYTHONPATH"] = str(module_dir)
    os.environ["WEDGED_SCHEDULER"] = str(scheduler)
    try:
        running = Script(
            "", ROLES, python=sys.executable, argv_extra=["-m", "sglang.launch_server", "--port", str(port)]
        )
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
    try:
        yield running
    finally:
        running.kill()
