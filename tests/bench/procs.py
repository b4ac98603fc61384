"""Process populations for the benchmarks that look like a real host's process table.

The collector lists whole GPU process trees, from the topmost ancestor below a session boundary. Children of
the benchmark itself would all share one tree with it (its parents are ``sh -c`` launchers), so a GPU holder
would drag every idle process into the snapshot. Each ``DetachedGroup`` is instead a small "server" that
double-forks away (reparented to pid 1, like a daemonised inference server) and starts ``count`` idle
``sleep`` children: one group for the ~300 idle processes, others for the GPU holders. The server ignores
SIGCHLD, so a killed child disappears at once (no zombie), as it would under a real launcher that reaps; and
it kills its children and exits when the benchmark process is gone, so nothing outlives a crashed run.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

_SERVER = r"""
import os, signal, subprocess, sys, time
count, pid_file, watch_pid = int(sys.argv[1]), sys.argv[2], int(sys.argv[3])
if os.fork():
    os._exit(0)
os.setsid()
signal.signal(signal.SIGCHLD, signal.SIG_IGN)
kids = [subprocess.Popen(["sleep", "3600"], stdin=subprocess.DEVNULL).pid for _ in range(count)]
with open(pid_file + ".tmp", "w") as fh:
    fh.write(" ".join(str(p) for p in [os.getpid()] + kids))
os.replace(pid_file + ".tmp", pid_file)
while True:
    time.sleep(0.5)
    try:
        os.kill(watch_pid, 0)
    except ProcessLookupError:
        break
for pid in kids:
    try:
        os.kill(pid, signal.SIGKILL)
    except OSError:
        pass
"""


def _start_ticks(pid: int) -> int | None:
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return int(text[text.rindex(")") + 2 :].split()[19])


def _gone(pid: int) -> bool:
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True
    return text[text.rindex(")") + 2] == "Z"


class DetachedGroup:
    """A detached server process with ``count`` idle children.

    Attributes:
        server_pid: The server (the root of its own process tree).
        pids: Its children, in start order.
    """

    def __init__(self, count: int) -> None:
        with tempfile.TemporaryDirectory(prefix="gputui-bench-group-") as tmp:
            pid_file = Path(tmp) / "pids"
            subprocess.run(
                [sys.executable, "-c", _SERVER, str(count), str(pid_file), str(os.getpid())],
                check=True,
                timeout=30,
                stdin=subprocess.DEVNULL,
            )
            deadline = time.monotonic() + 60
            while not pid_file.exists():
                if time.monotonic() > deadline:
                    raise RuntimeError("bench process group did not start")
                time.sleep(0.02)
            pids = [int(word) for word in pid_file.read_text().split()]
        self.server_pid = pids[0]
        self.pids = pids[1:]
        # Identity for every later signal: a pid freed by a kill may be reused by anyone on this machine.
        self._ticks = {pid: _start_ticks(pid) for pid in pids}

    def _signal(self, pid: int) -> bool:
        ticks = self._ticks.get(pid)
        try:
            fd = os.pidfd_open(pid)
        except OSError:
            return False
        try:
            # Checked after the pidfd is open, so the check and the signal cannot race a reuse of the pid.
            if ticks is None or _start_ticks(pid) != ticks:
                return False
            signal.pidfd_send_signal(fd, signal.SIGKILL)
        except OSError:
            return False
        finally:
            os.close(fd)
        return True

    def kill(self, pid: int, wait_s: float = 5.0) -> float:
        """SIGKILL one child; returns the monotonic time just after the signal, once the pid is gone."""
        if not self._signal(pid):
            raise RuntimeError(f"bench holder {pid} is not the process it was")
        killed_at = time.monotonic()
        deadline = killed_at + wait_s
        while not _gone(pid) and time.monotonic() < deadline:
            time.sleep(0.001)
        return killed_at

    def close(self) -> None:
        for pid in self.pids + [self.server_pid]:
            self._signal(pid)
