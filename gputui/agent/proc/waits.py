"""Where a stuck thread waits in the kernel: its wait channel and, as root, its kernel stack.

``/proc/PID/task/TID/wchan`` names the kernel function a sleeping thread waits in (the scheduler's own
functions skipped); it reads ``0`` for a thread that runs, and where the kernel will not say. Which module
that function belongs to it does not say; the thread's kernel stack (``/proc/PID/task/TID/stack``, readable by
root only) does, one frame a line, innermost first: ``[<0>] uvm_spin_loop+0xb4/0x100 [nvidia_uvm]`` (the
function, its offset and size, and in brackets its module; no brackets: the kernel itself). A thread that
spins in a driver stays in state R, where it has no wait channel: only its stack says where it is.

Which processes are read (only those the sample lists): one whose leader is in uninterruptible sleep (D), a
zombie-state leader (a defunct leader's threads live on), and a GPU job's process whose user time (the
thread group's, ``/proc/PID/stat`` field 14) stood still since the last sample while its system time moved:
a thread that runs in the kernel and never returns to its program, as a worker spinning in
``uvm_spin_loop`` after ``kill -9`` does. Of such a process, the threads in D, and the threads in R while its
user time stands still (each thread's user time is part of the group's, so none of them moved), are stuck;
at most ``WAITS_PER_PROCESS`` of them are described, each by reading at most ``STACK_READ_BYTES`` of its
stack. Nothing is guessed: a place that cannot be read is None, and the client says it as unknown.
"""

from __future__ import annotations

import errno
import os

from gputui.agent.proc.procfs import EXITED_STATES, ProcStat, parse_stat, read_small
from gputui.agent.protocol import thread_wait

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Iterable

WAITS_PER_PROCESS = 4
"""At most this many stuck threads of one process are described (wait channel, stack, pending signals)."""
THREADS_READ_MAX = 512
"""At most this many thread stat files of one process are read to find its stuck threads."""
PROCESSES_PER_SAMPLE = 64
"""At most this many processes' threads are read in one sample (the listed order: GPU jobs first)."""
STACK_READ_BYTES = 4096
"""At most this much of a thread's kernel stack is read (a stack is a few hundred bytes)."""
NAME_MAX = 128
"""A kernel symbol or module name longer than this is not one."""
SIGKILL_BIT = 1 << 8
"""SIGKILL (9) in the pending-signal masks of ``/proc/PID/task/TID/status``."""
PF_EXITING = 0x4
"""The kernel's "getting shut down" flag of a thread (``/proc/PID/task/TID/stat`` field 9): it is in
``do_exit``, where a SIGKILL it took is no longer pending."""
NVIDIA_MODULE_PREFIX = "nvidia"
"""nvidia, nvidia_uvm, nvidia_modeset, nvidia_drm, nvidia_peermem: the driver's modules."""
SCHEDULER_FRAMES = frozenset(
    {
        "__schedule",
        "schedule",
        "schedule_timeout",
        "schedule_preempt_disabled",
        "schedule_hrtimeout_range",
        "io_schedule",
        "io_schedule_timeout",
        "__switch_to",
        "__switch_to_asm",
        "preempt_schedule_common",
        "__cond_resched",
        "_cond_resched",
    }
)
"""Frames that say only that the thread sleeps (a wait channel skips them too)."""

_SYMBOL_BYTES = frozenset(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_.$")
_MODULE_BYTES = frozenset(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-")
_OPEN_FLAGS = os.O_RDONLY | getattr(os, "O_CLOEXEC", 0)


def _name(raw: bytes, allowed: frozenset[int]) -> str | None:
    """A kernel symbol or module name as text; None for anything that is not one (an address, garbage)."""
    if not raw or len(raw) > NAME_MAX or raw.startswith(b"0x") or not all(b in allowed for b in raw):
        return None
    return raw.decode("ascii")


def parse_stack(data: bytes) -> list[tuple[str, str | None]]:
    """The frames of a kernel stack (``/proc/PID/task/TID/stack``), innermost first: (function, module), the
    module None for the kernel itself. A line that is not a frame (an address alone, garbage) is skipped."""
    frames: list[tuple[str, str | None]] = []
    for raw in data.split(b"\n"):
        line = raw.strip()
        end = line.find(b">]")
        if not line.startswith(b"[<") or end < 0:
            continue
        words = line[end + 2 :].split()
        if not words:
            continue
        symbol = _name(words[0].split(b"+", 1)[0], _SYMBOL_BYTES)
        if symbol is None:
            continue
        module: str | None = None
        if len(words) > 1:
            word = words[1]
            if not (word.startswith(b"[") and word.endswith(b"]")):
                continue
            module = _name(word[1:-1], _MODULE_BYTES)
            if module is None:
                continue
        frames.append((symbol, module))
    return frames


def place_of(frames: list[tuple[str, str | None]]) -> tuple[str, str | None] | None:
    """Where a stack says its thread is: the innermost frame in an NVIDIA module (a kernel lock it waits on
    was taken by the driver), else in any module, else the innermost that is not the scheduler's."""
    for symbol, module in frames:
        if module is not None and module.startswith(NVIDIA_MODULE_PREFIX):
            return symbol, module
    for symbol, module in frames:
        if module is not None:
            return symbol, module
    for symbol, module in frames:
        if symbol not in SCHEDULER_FRAMES:
            return symbol, module
    return None


def parse_wchan(data: bytes | None) -> str | None:
    """A wait channel's function; None for ``0`` (runs, or the kernel will not say), unreadable or garbage."""
    if data is None:
        return None
    text = data.strip()
    return None if text == b"0" else _name(text, _SYMBOL_BYTES)


def exiting(data: bytes) -> bool | None:
    """Whether a thread's stat line has the PF_EXITING flag (field 9); None when it cannot be read."""
    close_at = data.rfind(b")")
    words = data[close_at + 1 :].split(None, 8) if close_at >= 0 else []
    try:
        return bool(int(words[6]) & PF_EXITING)
    except (IndexError, ValueError):
        return None


def sigkill_pending(data: bytes | None) -> bool | None:
    """Whether a thread's status (``/proc/PID/task/TID/status``) has SIGKILL pending, its own or its thread
    group's; None when the masks cannot be read."""
    if data is None:
        return None
    masks = 0
    for line in data.split(b"\n"):
        if line.startswith((b"SigPnd:", b"ShdPnd:")):
            try:
                if int(line.split(b":", 1)[1].strip(), 16) & SIGKILL_BIT:
                    return True
            except ValueError:
                return None
            masks += 1
    return False if masks == 2 else None


class ThreadWaits:
    """Finds the stuck threads of listed processes and reads where each waits; keeps, between process samples,
    each process's user time and since when it stands still, and since when each thread is in D.

    Args:
        proc_root: Where procfs is mounted.

    Not thread-safe: one owner (the process sampler).
    """

    def __init__(self, proc_root: str = "/proc") -> None:
        self.proc_root = proc_root
        self._user: dict[tuple[int, int], tuple[int, int, float]] = {}
        """(pid, start ticks) -> (user ticks, user + system ticks, since when the user ticks read so)."""
        self._in_d: dict[tuple[int, int], dict[int, float]] = {}
        """(pid, start ticks) -> thread id -> since when it has been seen in D."""
        self._stack_denied = False
        self._budget = PROCESSES_PER_SAMPLE

    def begin(self) -> None:
        """A new process sample starts: its budget of processes whose threads are read."""
        self._budget = PROCESSES_PER_SAMPLE

    def waits(self, stat: ProcStat, now: float, in_job: bool) -> list[dict[str, Any]] | None:
        """Where the stuck threads of this listed process wait (``protocol.thread_wait``), stuck longest
        first, D before R; None when it is not a stuck process or none of its threads is stuck.

        Args:
            stat: Its stat, read this sample.
            now: The sample's time (epoch seconds).
            in_job: It belongs to a GPU job (or a job remembered): only then is a process whose leader is not
                in D or Z read for threads spinning in the kernel.
        """
        key = (stat.pid, stat.start_ticks)
        still, spinning, user_since = self._note_user_time(key, stat, now)
        if stat.state not in ("D", "Z") and not (in_job and still and spinning):
            self._in_d.pop(key, None)
            return None
        if self._budget <= 0:
            return None
        self._budget -= 1
        task_dir = f"{self.proc_root}/{stat.pid}/task"
        seen_d = self._in_d.get(key, {})
        in_d: dict[int, float] = {}
        stuck: list[tuple[int, float, int, str, bool | None]] = []
        for thread, leaving in self._thread_stats(task_dir):
            if thread.state == "D":
                since = in_d[thread.pid] = seen_d.get(thread.pid, now)
                stuck.append((0, since, thread.pid, "D", leaving))
            elif thread.state == "R" and still:
                stuck.append((1, user_since, thread.pid, "R", leaving))
        self._in_d[key] = in_d
        stuck.sort(key=lambda one: one[:3])
        found = [self._describe(task_dir, *one[1:]) for one in stuck[:WAITS_PER_PROCESS]]
        return found or None

    def forget_except(self, live_keys: Iterable[tuple[int, int]]) -> None:
        """Drop what is kept of processes that are no longer listed."""
        keep = set(live_keys)
        for book in (self._user, self._in_d):
            for key in [k for k in book if k not in keep]:
                del book[key]

    def _note_user_time(self, key: tuple[int, int], stat: ProcStat, now: float) -> tuple[bool, bool, float]:
        """(user time still since the last sample, system time moved meanwhile, since when it is still)."""
        user, total = stat.user_ticks, stat.cpu_ticks
        if user is None or total is None:
            return False, False, now
        last = self._user.get(key)
        if last is None or last[0] != user:
            self._user[key] = (user, total, now)
            return False, False, now
        self._user[key] = (user, total, last[2])
        return True, total > last[1], last[2]

    def _thread_stats(self, task_dir: str) -> list[tuple[ProcStat, bool | None]]:
        """The process's threads that have not exited, by thread id (at most ``THREADS_READ_MAX`` read), each
        with whether it is exiting (``exiting``)."""
        try:
            entries = os.listdir(task_dir)
        except OSError:
            return []
        tids = sorted(int(entry) for entry in entries if entry.isdigit())
        threads = []
        for tid in tids[:THREADS_READ_MAX]:
            data = read_small(f"{task_dir}/{tid}/stat")
            stat = None if data is None else parse_stat(tid, data)
            if data is not None and stat is not None and stat.state not in EXITED_STATES:
                threads.append((stat, exiting(data)))
        return threads

    def _describe(
        self, task_dir: str, since: float, tid: int, state: str, leaving: bool | None
    ) -> dict[str, Any]:
        """Where one stuck thread is: from its stack where that can be read, else from its wait channel; and
        whether it was killed (SIGKILL pending, or already exiting: ``leaving``)."""
        thread_dir = f"{task_dir}/{tid}"
        place = None if self._stack_denied else self._stack_place(f"{thread_dir}/stack")
        symbol: str | None = None
        module: str | None = None
        if place is not None:
            symbol, module = place
        else:
            symbol = parse_wchan(read_small(f"{thread_dir}/wchan"))
        killed = True if leaving else sigkill_pending(read_small(f"{thread_dir}/status"))
        if killed is False and leaving is None:
            killed = None
        return thread_wait(tid, state, symbol, module, place is not None, since, killed)

    def _stack_place(self, path: str) -> tuple[str, str | None] | None:
        """The place a thread's stack names; None when it cannot be read (not root: never tried again)."""
        try:
            fd = os.open(path, _OPEN_FLAGS)
        except OSError as exc:
            if exc.errno in (errno.EACCES, errno.EPERM):
                self._stack_denied = True
            return None
        try:
            data = os.read(fd, STACK_READ_BYTES)
        except OSError as exc:
            if exc.errno in (errno.EACCES, errno.EPERM):
                self._stack_denied = True
            return None
        finally:
            os.close(fd)
        return place_of(parse_stack(data))
