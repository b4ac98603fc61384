"""Section 9: ``gputui exporter`` beside ``nvitop-exporter``, CPU per scrape on the same fake host.

    .venv/bin/python tests/bench/exporter_bench.py [--quick] [--nvitop-exporter PATH] [--json FILE]

Both exporters run as whole processes under the fake NVML (8 GPUs, one of them held by a real process),
each sampling once per second (gputui: ``--interval 1``, its process list every 3 s as shipped;
nvitop-exporter: ``--interval 1``), and are scraped once per second, interleaved, as a Prometheus with a 1 s
scrape interval would. CPU per scrape is each process's CPU (utime + stime of all its threads, from
``/proc/PID/stat``) over the window divided by the scrapes: background sampling included, which is what an
exporter costs per scrape at that interval. The answer's size and series count are printed beside it.

nvitop-exporter (1.7.2, the version nvitop 1.7.2 ships with) is installed into a throwaway virtualenv under
``~/.cache/gputui-bench/exporter-peers-venv`` unless ``--nvitop-exporter`` names one; it is no project
dependency. Without it the row says ``n/a``. The fake library answers ``nvmlDeviceGetFieldValues`` for the
recovery action only: nvitop-exporter's NVLink fields read NOT_SUPPORTED, as on a GPU without NVLink.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parents[2]
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

from tests.fakenvml import FakeNvmlState, build, env_for  # noqa: E402

CACHE_DIR = Path(os.environ.get("GPUTUI_BENCH_CACHE") or Path.home() / ".cache" / "gputui-bench")
PEER_VENV = CACHE_DIR / "exporter-peers-venv"
PEER_PACKAGE = "nvitop-exporter==1.7.2"
CLK_TCK = os.sysconf("SC_CLK_TCK")
HOLDER = "import time\nwhile True: time.sleep(3600)\n"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def _peer(path: str | None) -> Path | None:
    if path:
        return Path(path)
    binary = PEER_VENV / "bin" / "nvitop-exporter"
    if binary.exists():
        return binary
    try:
        subprocess.run([sys.executable, "-m", "venv", str(PEER_VENV)], check=True, capture_output=True)
        subprocess.run(
            [str(PEER_VENV / "bin" / "pip"), "install", "-q", PEER_PACKAGE], check=True, capture_output=True
        )
    except (OSError, subprocess.CalledProcessError) as exc:
        print(f"nvitop-exporter: cannot install {PEER_PACKAGE}: {exc}", file=sys.stderr)
        return None
    return binary if binary.exists() else None


def _get(url: str) -> bytes:
    with urllib.request.urlopen(url, timeout=10) as answer:  # noqa: S310 - loopback
        return answer.read()


def _wait_ready(url: str, process: subprocess.Popen[bytes], marker: bytes) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"{url}: the exporter exited")
        try:
            if marker in _get(url):
                return
        except OSError:
            pass
        time.sleep(0.3)
    raise TimeoutError(f"{url}: no answer")


def measure(window_s: float, peer: Path | None) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="gputui-exporter-bench-") as tmp:
        root = Path(tmp)
        lib = root / "lib"
        lib.mkdir()
        build(lib)
        holder = subprocess.Popen([sys.executable, "-c", HOLDER])
        state = FakeNvmlState.with_gpus(8)
        state.add_holder(0, holder.pid, 40960, "compute")
        state.write(root / "state")
        env = {**os.environ, **env_for(lib, root / "state"), "XDG_STATE_HOME": str(root / "xdg")}
        env["PYTHONPATH"] = str(REPO_ROOT)
        ours_port, peer_port = _free_port(), _free_port()
        exporters: dict[str, tuple[subprocess.Popen[bytes], str]] = {}
        try:
            ours = subprocess.Popen(
                [sys.executable, "-m", "gputui.cli", "exporter", "--listen", f"127.0.0.1:{ours_port}",
                 "--interval", "1", "--no-discover"],
                env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=str(REPO_ROOT),
            )  # fmt: skip
            exporters["gputui exporter"] = (ours, f"http://127.0.0.1:{ours_port}/metrics")
            _wait_ready(exporters["gputui exporter"][1], ours, b"gputui_clean_slate")
            if peer is not None:
                theirs = subprocess.Popen(
                    [str(peer), "--bind-address", "127.0.0.1", "--port", str(peer_port), "--interval", "1"],
                    env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                )  # fmt: skip
                exporters["nvitop-exporter 1.7.2"] = (theirs, f"http://127.0.0.1:{peer_port}/metrics")
                _wait_ready(exporters["nvitop-exporter 1.7.2"][1], theirs, b"gpu_memory_used")
            time.sleep(5.0)  # settle: first samples, imports, caches
            start = {name: _cpu_s(p.pid) for name, (p, _) in exporters.items()}
            sizes: dict[str, list[int]] = {name: [] for name in exporters}
            scrapes = 0
            ends = time.monotonic() + window_s
            while time.monotonic() < ends:
                tick = time.monotonic()
                for name, (_, url) in exporters.items():
                    sizes[name].append(len(_get(url)))
                scrapes += 1
                time.sleep(max(0.0, 1.0 - (time.monotonic() - tick)))
            spent = {name: _cpu_s(p.pid) - start[name] for name, (p, _) in exporters.items()}
            series = {
                name: sum(1 for line in _get(url).decode().splitlines() if line and not line.startswith("#"))
                for name, (_, url) in exporters.items()
            }
        finally:
            for process, _ in exporters.values():
                process.send_signal(signal.SIGTERM)
            for process, _ in exporters.values():
                try:
                    process.wait(15)
                except subprocess.TimeoutExpired:
                    process.kill()
                    process.wait()
            holder.kill()
            holder.wait()
    rows = []
    for name in exporters:
        rows.append(
            {
                "metric": f"{name}: CPU per scrape (1 s scrape, 1 s sample)",
                "value": 1000 * spent[name] / scrapes,
                "unit": "CPU ms/scrape",
                "bytes": statistics.median(sizes[name]),
                "series": series[name],
                "scrapes": scrapes,
            }
        )
    if peer is None:
        rows.append(
            {"metric": "nvitop-exporter 1.7.2: CPU per scrape", "value": None, "unit": "n/a (not installed)"}
        )
    return {"rows": rows}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a 20 s window instead of 60 s")
    parser.add_argument(
        "--nvitop-exporter", default=None, metavar="PATH", help="an installed nvitop-exporter"
    )
    parser.add_argument("--no-peers", action="store_true", help="gputui's exporter alone")
    parser.add_argument("--window-s", type=float, default=None, metavar="S", help="the measuring window")
    parser.add_argument("--json", default=None, metavar="FILE")
    args = parser.parse_args()
    if shutil.which("gcc") is None:
        print("n/a (gcc is needed to build the fake NVML)")
        return 0
    peer = None if args.no_peers else _peer(args.nvitop_exporter)
    window = args.window_s if args.window_s is not None else 20.0 if args.quick else 60.0
    result = measure(window, peer)
    print(f"{'sec':<4}{'metric':<64}{'value':>8}  unit")
    for row in result["rows"]:
        value = "n/a" if row["value"] is None else f"{row['value']:.2f}"
        extra = f"  ({row['bytes']:.0f} B, {row['series']} series)" if row["value"] is not None else ""
        print(f"{'9':<4}{row['metric']:<64}{value:>8}  {row['unit']}{extra}")
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
