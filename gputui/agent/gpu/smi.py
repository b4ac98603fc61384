"""GPU figures from the driver's ``nvidia-smi``: the backend of hosts whose NVML library cannot be loaded."""

from __future__ import annotations

import subprocess
import threading
import time

from gputui.agent.gpu.smiparse import (
    SMI_EXIT_NO_DRIVER,
    SMI_QUERY_APPS,
    SMI_QUERY_GPU,
    parse_smi_apps_output,
    parse_smi_gpu_line,
    parse_smi_handle_error,
    pci_key,
    smi_exit_error,
    smi_value,
    with_lost_gpus,
)
from gputui.agent.proc.procfs import text_of
from gputui.agent.protocol import MODE_SMI

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

SMI_DEADLINE_S = 5.0
SMI_RESTART_S = 5.0
"""A stopped ``nvidia-smi`` loop is started again at most this often."""


class SmiBackend:
    """GPU figures from one long-lived ``nvidia-smi --query-gpu ... -lms N`` process (no pynvml).

    A reader thread parses its lines as they come; a repeated index starts the next block of the loop. The
    process lists come from ``--query-compute-apps`` at the process rate. Every run is an argv list.
    """

    mode = MODE_SMI

    def __init__(self, smi_path: str, interval_s: float) -> None:
        self.smi_path = smi_path
        self.interval_s = interval_s
        self.host_error: str | None = None
        self.driver_version: str | None = None
        self.cuda_driver_version: str | None = None
        self._proc: subprocess.Popen | None = None
        self._lock = threading.Lock()
        self._complete: dict[int, dict[str, Any]] = {}
        self._partial: dict[int, dict[str, Any]] = {}
        self._latest_time = 0.0
        self._pci_index: dict[str, int] = {}
        self._lost: dict[str, str] = {}  # bus id -> reason, for GPUs without a line of their own
        self._output_tail: list[str] = []
        self._last_start = -1e18
        self._apps: dict[str, list[dict[str, Any]]] = {}
        self._closed = False

    def start(self) -> None:
        self.driver_version = self._query_driver_version()
        self._ensure_running()

    def _run_once(self, argv: list[str]) -> tuple[int | None, str]:
        try:
            done = subprocess.run(  # noqa: S603 - fixed argv list, no shell
                argv,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                timeout=SMI_DEADLINE_S,
                check=False,
            )
        except subprocess.TimeoutExpired:
            return None, "nvidia-smi timed out"
        except OSError as exc:
            return None, f"cannot run nvidia-smi: {exc}"
        return done.returncode, text_of(done.stdout)

    def _query_driver_version(self) -> str | None:
        code, out = self._run_once([self.smi_path, "--query-gpu=driver_version", "--format=csv,noheader"])
        if code != 0:
            return None
        for line in out.splitlines():
            value = smi_value(line)
            if value is not None and len(value) < 40:
                return value
        return None

    def _ensure_running(self) -> None:
        running = self._proc is not None and self._proc.poll() is None
        if running or time.monotonic() - self._last_start < SMI_RESTART_S or self._closed:
            return
        self._last_start = time.monotonic()
        period_ms = max(100, int(self.interval_s * 1000))
        argv = [
            self.smi_path,
            "--query-gpu=" + SMI_QUERY_GPU,
            "--format=csv,noheader,nounits",
            "-lms",
            str(period_ms),
        ]
        try:
            proc = subprocess.Popen(  # noqa: S603 - fixed argv list, no shell
                argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT
            )
        except OSError as exc:
            self.host_error = f"cannot run nvidia-smi: {exc}"
            return
        self._proc = proc
        threading.Thread(target=self._read, args=(proc,), name="gputui-smi", daemon=True).start()
        # The first block follows right away: wait for it briefly so the first sample is not empty.
        deadline = time.monotonic() + SMI_DEADLINE_S
        while time.monotonic() < deadline:
            with self._lock:
                if self._complete or self._partial or self.host_error:
                    break
            time.sleep(0.02)
        # Let the rest of a block arrive (all GPUs print within a few milliseconds).
        time.sleep(0.05)

    def _read(self, proc: subprocess.Popen) -> None:
        if proc.stdout is None:
            return
        for raw in iter(proc.stdout.readline, b""):
            line = text_of(raw)
            gpu = parse_smi_gpu_line(line)
            with self._lock:
                if gpu is None:
                    handle_error = parse_smi_handle_error(line)
                    index = None if handle_error is None else self._pci_index.get(handle_error[0])
                    if handle_error is not None and index is not None:
                        gpu = {"index": index, "pci_bus_id": handle_error[0], "error": handle_error[1]}
                    elif handle_error is not None:  # never seen with a line of its own: ``poll`` adds it
                        self._lost[handle_error[0]] = handle_error[1]
                        continue
                    else:
                        if line.strip():
                            self._output_tail = (self._output_tail + [line.strip()])[-3:]
                        continue
                if gpu["index"] in self._partial:  # a repeated index: the previous block is complete
                    self._complete = self._partial
                    self._partial = {}
                self._partial[gpu["index"]] = gpu
                if gpu.get("pci_bus_id"):
                    self._pci_index[pci_key(str(gpu["pci_bus_id"]))] = gpu["index"]
                self._latest_time = time.monotonic()
                self.host_error = None
        code = proc.wait()
        with self._lock:
            if self._closed:
                return
            printed = bool(self._partial or self._complete or self._lost)
            if printed and code not in SMI_EXIT_NO_DRIVER:
                # It printed the GPUs it could read and the handle errors of those it could not, then gave
                # up (15: a GPU is lost; 255: "Unknown Error"): keep what it printed, each error that GPU's
                # row, and the next start reads them again. A failure no GPU row explains is said too.
                self._complete.update(self._partial)
                self._partial = {}
                explained = bool(self._lost) or any(g.get("error") for g in self._complete.values())
                if code != 0 and not explained:
                    self.host_error = smi_exit_error(code, "\n".join(self._output_tail))
                return
            self.host_error = smi_exit_error(code, "\n".join(self._output_tail))
            self._complete = {}
            self._partial = {}

    def _query_apps(self) -> None:
        argv = [self.smi_path, "--query-compute-apps=" + SMI_QUERY_APPS, "--format=csv,noheader,nounits"]
        code, out = self._run_once(argv)
        if code == 0:
            self._apps = parse_smi_apps_output(out)

    def poll(self, want_processes: bool) -> list[dict[str, Any]]:
        self._ensure_running()
        if want_processes:
            self._query_apps()
        with self._lock:
            view = dict(self._complete)
            view.update(self._partial)
            gpus = with_lost_gpus([dict(view[i]) for i in sorted(view)], self._lost)
            age_s = time.monotonic() - self._latest_time
            silent_s = time.monotonic() - self._last_start
            if not gpus and self.host_error is None and silent_s > SMI_DEADLINE_S:
                # Running but silent (a hung driver call inside nvidia-smi): say so rather than show nothing.
                self.host_error = f"nvidia-smi has printed no GPU line for {silent_s:.0f} s"
        stale = bool(gpus) and age_s > max(5.0, self.interval_s * 5)
        for gpu in gpus:
            if stale and not gpu.get("error"):
                gpu["error"] = f"nvidia-smi stopped reporting ({age_s:.0f} s ago)"
            if want_processes:
                gpu["processes"] = [dict(p) for p in self._apps.get(gpu.get("uuid") or "", [])]
        return gpus

    def close(self) -> None:
        with self._lock:
            self._closed = True
        proc = self._proc
        if proc is not None and proc.poll() is None:
            proc.kill()
            try:
                proc.wait(timeout=2.0)
            except subprocess.TimeoutExpired:
                pass
