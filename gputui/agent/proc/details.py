"""Per-process details a snapshot lists: owner, command line (as it goes on the wire), rss and cgroup.

Read from /proc, or through psutil where it is wanted and installed (imported on the first read, not before);
kept per process (pid + start ticks, so never another process's) for ``CMDLINE_CACHE_S``.
"""

from __future__ import annotations

import pwd
import sys
import time

from gputui.agent.argv_secrets import redact_argv
from gputui.agent.proc.procfs import (
    CGROUP_MAX_BYTES,
    PAGE_SIZE,
    ProcStat,
    ProcTexts,
    cgroup_of_text,
    json_safe,
    read_cmdline,
    read_real_uid,
)
from gputui.agent.wire import WIRE_CMDLINE_BYTES, wire_cmdline, wire_text

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

CMDLINE_CACHE_S = 10.0
"""Cached cmdlines are re-read after this long: servers rename themselves (setproctitle) after start."""


def psutil_installed() -> bool:
    """Whether psutil can be found, without importing it (its import costs more than a whole sample)."""
    if "psutil" in sys.modules:
        return sys.modules["psutil"] is not None
    # What ``import`` asks: the meta path finders (a remote collector's bundle importer is one of them).
    for finder in sys.meta_path:
        find_spec = getattr(finder, "find_spec", None)
        try:
            found = find_spec is not None and find_spec("psutil", None) is not None
        except Exception:  # a finder that cannot answer knows of no psutil
            found = False
        if found:
            return True
    return False


def load_psutil() -> Any:
    """The psutil module, or None where it is not installed (or does not import)."""
    try:
        import psutil
    except Exception:  # a broken install is as good as none: /proc is read directly
        return None
    return psutil


class ProcDetails:
    """Per-process details (user, cmdline, rss) with caches, from /proc or psutil.

    Command lines are kept and returned as they go on the wire: cut to ``WIRE_CMDLINE_BYTES``
    (``wire_cmdline``), never the megabytes a process may carry.
    """

    def __init__(self, use_psutil: bool, texts: ProcTexts | None = None) -> None:
        self.use_psutil = bool(use_psutil) and psutil_installed()
        self.texts = texts or ProcTexts()
        """Where cgroup files are read: the owner reader's, so that a process's is read once for both."""
        self._psutil: Any = None
        self._users: dict[int, str | None] = {}
        # (pid, start ticks) -> (read at, uid, cmdline as sent, whether it was cut, its bytes on the wire)
        self._cmdlines: dict[tuple[int, int], tuple[float, int, list[str], bool, int]] = {}
        self._cgroups: dict[tuple[int, int], tuple[float, str | None]] = {}

    @property
    def psutil(self) -> Any:
        """psutil when it is wanted and imports (imported on first use), else None."""
        if self.use_psutil and self._psutil is None:
            self._psutil = load_psutil()
            if self._psutil is None:  # installed but broken: /proc from now on
                self.use_psutil = False
        return self._psutil

    def cgroup(self, stat: ProcStat) -> str | None:
        """``parse_cgroup`` of a process's cgroup file (read through ``texts``), kept ``CMDLINE_CACHE_S`` (the
        job rule reads every ancestor's)."""
        key = (stat.pid, stat.start_ticks)
        now = time.monotonic()
        cached = self._cgroups.get(key)
        if cached is not None and now - cached[0] < CMDLINE_CACHE_S:
            return cached[1]
        data = self.texts.read(stat.pid, stat.start_ticks, "cgroup", CGROUP_MAX_BYTES)
        value = None if data is None else cgroup_of_text(data)
        self._cgroups[key] = (now, value)
        return value

    def user_name(self, uid: int | None) -> str | None:
        if uid is None:
            return None
        if uid not in self._users:
            try:
                self._users[uid] = wire_text(json_safe(pwd.getpwuid(uid).pw_name))
            except (KeyError, OverflowError):
                self._users[uid] = str(uid)
        return self._users[uid]

    def read(self, pid: int) -> tuple[int | None, list[str] | None]:
        """The real uid and the whole argv of a process, its secrets hidden (``argv_secrets``); None for
        what could not be read."""
        uid: int | None = None
        cmdline: list[str] | None = None
        psutil = self.psutil
        if psutil is not None:
            try:
                proc = psutil.Process(pid)
                uid = proc.uids().real
                try:
                    cmdline = [json_safe(a) or "" for a in proc.cmdline()]
                except psutil.ZombieProcess:
                    cmdline = []
            except psutil.Error:
                pass
        else:
            uid = read_real_uid(pid)
            cmdline = read_cmdline(pid)
        return uid, None if cmdline is None else redact_argv(cmdline)

    def details(self, stat: ProcStat, now: float) -> dict[str, Any]:
        """uid, user, cmdline (as sent), cmdline_truncated, cmdline_bytes and rss_kib of one process.

        The uid and cmdline of a process (pid + start ticks, so never another process's) are kept for
        ``CMDLINE_CACHE_S``: a process changes either only by exec or setuid, and a listed process would
        otherwise cost a status and a cmdline read (with psutil, a stat read more) on every sample.
        """
        # The rss of the stat line just read (psutil's memory_info reads the same counter from statm), and
        # user names from the cached pwd lookup (psutil's username() looks the name up on every call).
        rss_kib = stat.rss_pages * (PAGE_SIZE // 1024)
        key = (stat.pid, stat.start_ticks)
        cached = self._cmdlines.get(key)
        if cached is None or now - cached[0] >= CMDLINE_CACHE_S:
            uid, full = self.read(stat.pid)
            cmdline, truncated, wire_bytes = wire_cmdline(full or [], WIRE_CMDLINE_BYTES)
            if uid is None or full is None:
                return self._as_dict(uid, cmdline, truncated, wire_bytes, rss_kib, self.cgroup(stat))
            cached = (now, uid, cmdline, truncated, wire_bytes)
            self._cmdlines[key] = cached
        return self._as_dict(cached[1], cached[2], cached[3], cached[4], rss_kib, self.cgroup(stat))

    def _as_dict(
        self,
        uid: int | None,
        cmdline: list[str],
        truncated: bool,
        wire_bytes: int,
        rss_kib: int,
        cgroup: str | None,
    ) -> dict[str, Any]:
        return {
            "uid": uid,
            "user": self.user_name(uid),
            "cmdline": cmdline,
            "cmdline_truncated": truncated,
            "cmdline_bytes": wire_bytes,
            "rss_kib": rss_kib,
            "cgroup": cgroup,
        }

    def forget_except(self, live: set[tuple[int, int]]) -> None:
        for key in [k for k in self._cmdlines if k not in live]:
            del self._cmdlines[key]
        for key in [k for k in self._cgroups if k not in live]:
            del self._cgroups[key]
