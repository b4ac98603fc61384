"""Profilers of GPU jobs: a member that is one (by its binary and argv), or carries one's injection.

A process is a profiler when its binary is Nsight Systems' (``nsys profile|launch``, its ``--start-agent``
daemon, ``nsys-launcher``) or Nsight Compute's (``ncu``), judged by the basename of argv[0] and the shape of
the rest: a process merely named ``nsys-foo``, or an ``nsys`` running ``stats`` on a report, is none. It
carries a profiler's injection when its environment sets ``CUDA_INJECTION64_PATH`` or
``NVTX_INJECTION64_PATH`` (to anything but ``none``), or preloads one of Nsight's or CUPTI's libraries
(``LD_PRELOAD``): what ``nsys``/``ncu`` leave in every process they trace.

The environment is hostile and may be huge: at most ``ENVIRON_MAX_BYTES`` of ``/proc/PID/environ`` are read
(``procfs.read_capped``), only the three keys above are looked at, and of their values nothing is kept but
whether they name a profiler's library and, for a library of the fixed table ``LIBRARIES``, its basename.
An environment that cannot be read (another user's process) is said as such, never guessed.

An ``nsys profile`` killed before it finished leaves its raw stream (``OUTPUT.qdstrm``) without the report
(``OUTPUT.nsys-rep``): ``unfinished_reports`` finds those, ``remove_report`` removes one when asked.

Stdlib only (Python 3.8): this runs in the collector.
"""

from __future__ import annotations

import fnmatch
import os

from gputui.agent.proc.procfs import ParsedBy, ProcTexts, file_identity
from gputui.agent.protocol import (
    CUPTI,
    DAEMON,
    NCU,
    NSYS,
    TOOL,
    TOOLS,
    VIA_ARGV,
    VIA_ENVIRON,
    VIA_UNREADABLE,
)
from gputui.agent.wire import wire_text

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Iterable

ENVIRON_MAX_BYTES = 64 * 1024
"""/proc/<pid>/environ is read no further than this."""
INJECTION_KEYS = ("CUDA_INJECTION64_PATH", "NVTX_INJECTION64_PATH")
"""Variables whose value is a tool library the CUDA driver or NVTX loads into the process."""
PRELOAD_KEY = "LD_PRELOAD"
ENV_KEYS = INJECTION_KEYS + (PRELOAD_KEY,)
"""The only variables of an environment looked at."""


NSYS_BINARIES = frozenset({"nsys"})
NSYS_DAEMON_BINARIES = frozenset({"nsys-launcher"})
NCU_BINARIES = frozenset({"ncu", "nv-nsight-cu-cli"})
NSYS_PROFILING = ("profile", "launch")
"""``nsys`` subcommands that start the application under the profiler."""
NSYS_AGENT_FLAG = "--start-agent"
"""``nsys --start-agent``: the daemon ``nsys profile`` starts, which outlives a killed launcher."""

LIBRARIES = (
    ("libToolsInjection", NSYS),
    ("libcupti", CUPTI),
    ("libcuda-injection", NCU),
    ("libInterceptorInjectionTarget", NCU),
    ("libTreeLauncherTargetInjection", NCU),
)
"""Basename prefixes of the libraries a profiler injects: Nsight Systems' ``libToolsInjection64.so`` (and
its ``Proxy``, ``CuBLAS``... siblings), CUPTI, Nsight Compute's target libraries."""

OPTION_CHARS = 256
LIBRARY_CHARS = 64
NSYS_OPTIONS = {
    "t": "trace",
    "trace": "trace",
    "o": "output",
    "output": "output",
    "cuda-graph-trace": "cuda_graph_trace",
    "c": "capture_range",
    "capture-range": "capture_range",
}
"""The nsys options a finding names: trace kinds (NVTX among them), CUDA graph tracing, where the report
goes, and whether collection waits for a capture range."""
NCU_OPTIONS = {"o": "output", "export": "output", "set": "set", "replay-mode": "replay_mode"}
NCU_FLAGS = frozenset({"f", "force-overwrite", "h", "help", "v", "version", "list-sets", "query-metrics"})
"""ncu options that take no value."""
REPORT_SUFFIXES = (".nsys-rep", ".qdrep")
"""The finished report (``.qdrep`` before Nsight Systems 2021.4)."""
STREAM_SUFFIX = ".qdstrm"
"""The raw event stream nsys writes while it collects and turns into the report at the end."""
MAX_REPORTS = 4
TEMP_FOLDERS = ("/var/tmp", "/tmp")  # noqa: S108 - read only: where nsys writes, never a file gputui makes
"""Where Nsight Systems collects before it writes the report (``/var/tmp`` where it may, else ``/tmp``)."""
TEST_TEMP_ENV = "GPUTUI_TEST_NSYS_TEMP"
"""Tests only: the one folder looked at in place of ``TEMP_FOLDERS``."""
TEMP_STREAM = "nsys-report-*" + ".qdstrm"
"""The name of Nsight Systems' own raw stream there: "Generating '/var/tmp/nsys-report-4279.qdstrm'"."""
TEMP_STREAM_SLACK_S = 60.0
"""A stream written this long before the job was first seen is still the job's (it was seen late)."""
DIR_SCAN_MAX = 4096
"""Entries of a report's folder looked at for a templated output (``%p``, ``%n``, ``%q{VAR}``)."""


def _basename(path: str) -> str:
    return path.rstrip("/").rsplit("/", 1)[-1]


def _options(
    args: list[str], names: dict[str, str], flags: frozenset[str] = frozenset()
) -> tuple[dict[str, str], int]:
    """The named options before the application, and where the application starts.

    Every nsys option, and every ncu option but ``flags``, takes a value: ``--name=value``, ``--name
    value``, ``-x value`` or ``-xvalue``; the first word that is not an option is the application's.
    """
    found: dict[str, str] = {}
    at = 0
    while at < len(args):
        arg = args[at]
        if arg == "--":
            return found, at + 1
        if not arg.startswith("-") or arg == "-":
            break
        if arg.startswith("--"):
            name, equals, value = arg[2:].partition("=")
            step = 1 if equals else 2
        else:
            name, value = arg[1:2], arg[2:].lstrip("=")
            step = 1 if value else 2
        if name in flags:
            step = 1
        elif step == 2:
            value = args[at + 1] if at + 1 < len(args) else ""
        key = names.get(name)
        if key is not None:
            found[key] = wire_text(value, OPTION_CHARS) or ""
        at += step
    return found, at


def profiler_of_argv(argv: Iterable[str]) -> dict[str, Any] | None:
    """The profiler a command line is, with the options a finding names; None when it is none.

    ``{"tool", "via": "argv", "command"}`` and, of an ``nsys profile|launch``, ``trace``,
    ``cuda_graph_trace``, ``output`` and ``capture_range`` where given; of an ``ncu``, ``output``, ``set``
    and ``replay_mode``. A helper daemon (``nsys --start-agent``, ``nsys-launcher``) has the command
    ``daemon``.
    """
    args = list(argv)
    if not args:
        return None
    binary = _basename(args[0])
    if binary in NSYS_DAEMON_BINARIES:
        return {"tool": NSYS, "via": VIA_ARGV, "command": DAEMON}
    if binary in NSYS_BINARIES:
        if NSYS_AGENT_FLAG in args[1:3]:
            return {"tool": NSYS, "via": VIA_ARGV, "command": DAEMON}
        if len(args) < 2 or args[1] not in NSYS_PROFILING:
            return None  # nsys stats, export, --version: not a profiled run
        options, app = _options(args[2:], NSYS_OPTIONS)
        if 2 + app >= len(args) and args[1] == "profile":
            return None  # "nsys profile" with no application: an error message, not a profiler
        return {"tool": NSYS, "via": VIA_ARGV, "command": args[1], **options}
    if binary in NCU_BINARIES:
        options, app = _options(args[1:], NCU_OPTIONS, NCU_FLAGS)
        if 1 + app >= len(args):
            return None  # ncu --version, ncu --query-metrics
        return {"tool": NCU, "via": VIA_ARGV, "command": "profile", **options}
    return None


def _library(path: bytes) -> tuple[str, str] | None:
    """(tool, basename) of a profiler's library from the fixed table; None for any other library."""
    name = _basename(path.decode("utf-8", "backslashreplace").strip())
    for prefix, tool in LIBRARIES:
        if name.startswith(prefix):
            return tool, wire_text(name, LIBRARY_CHARS) or prefix
    return None


def injection_of_environ(data: bytes) -> dict[str, Any] | None:
    """The profiler's injection an environment block (NUL-separated) carries; None when it carries none.

    ``{"tool", "via": "environ", "keys": [...], "library"}``: the variables that carry it, and the basename
    of the profiler's library where it is one of ``LIBRARIES``. Nothing else of the environment is kept.
    """
    keys: list[str] = []
    tools: list[str] = []
    library = None
    for entry in data.split(b"\0"):
        name, equals, value = entry.partition(b"=")
        if not equals:
            continue
        key = name.decode("ascii", "replace")
        if key in INJECTION_KEYS:
            if not value.strip() or value.strip().lower() == b"none":
                continue
            known = _library(value)
            keys.append(key)
            tools.append(known[0] if known else TOOL)
            library = library or (known[1] if known else None)
        elif key == PRELOAD_KEY:
            for part in value.replace(b" ", b":").split(b":"):
                known = _library(part) if part else None
                if known is not None:
                    keys.append(key)
                    tools.append(known[0])
                    library = library or known[1]
    if not keys:
        return None
    tool = min(tools, key=TOOLS.index)
    return {"tool": tool, "via": VIA_ENVIRON, "keys": sorted(set(keys)), "library": library}


def _resolved(output: str, cwd: str | None) -> str:
    """An output path made absolute against the profiler's working directory (as given where not known)."""
    if output.startswith("/") or cwd is None:
        return output
    return os.path.normpath(os.path.join(cwd, output))


def _read_cwd(pid: int) -> str | None:
    try:
        return os.readlink(f"/proc/{pid}/cwd")
    except OSError:
        return None


class ProfilerMarks:
    """The profiler mark of each process of a GPU job, kept per process (pid + start ticks).

    The environment and the working directory are read once per process: what a process was started with
    does not change. Not thread-safe: one owner (the collector's sampling).
    """

    def __init__(self, proc_root: str = "/proc", texts: ProcTexts | None = None) -> None:
        self.proc_root = proc_root
        self.texts = texts or ProcTexts(proc_root)
        """Where environments are read: the owner reader's, so that a process's is read once for both."""
        self._environ: dict[tuple[int, int], dict[str, Any] | None] = {}
        self._injection_of_text = ParsedBy(injection_of_environ)
        self._unreadable: set[tuple[int, int]] = set()
        self._cwd: dict[tuple[int, int], str | None] = {}

    def mark(self, pid: int, start_ticks: int, cmdline: list[str]) -> dict[str, Any] | None:
        """What ``protocol.PROCESS_PROFILER`` says of one process (None: no profiler, no injection)."""
        key = (pid, start_ticks)
        found = profiler_of_argv(cmdline)
        if found is not None:
            if found.get("output"):
                if key not in self._cwd:
                    self._cwd[key] = _read_cwd(pid)
                found["output"] = wire_text(_resolved(found["output"], self._cwd[key]), OPTION_CHARS)
            return found
        if key not in self._environ and key not in self._unreadable:
            data = self.texts.read(pid, start_ticks, "environ", ENVIRON_MAX_BYTES)
            if data is None:
                self._unreadable.add(key)
            else:
                self._environ[key] = self._injection_of_text(data)
        if key in self._unreadable:
            return {"tool": None, "via": VIA_UNREADABLE}
        injected = self._environ.get(key)
        return None if injected is None else dict(injected)

    def forget_except(self, live: set[tuple[int, int]]) -> None:
        for cache in (self._environ, self._cwd):
            for key in [k for k in cache if k not in live]:
                del cache[key]
        self._unreadable &= live


# -- what a killed profiler leaves ------------------------------------------------------------------------


def report_base(output: str) -> str:
    """The output path without its report suffix (nsys adds ``.nsys-rep`` to a path that has none)."""
    for suffix in REPORT_SUFFIXES:
        if output.endswith(suffix):
            return output[: -len(suffix)]
    return output


def _finished(base: str) -> bool:
    return any(os.path.lexists(base + suffix) for suffix in REPORT_SUFFIXES)


def _stream_bases(output: str) -> list[str]:
    """The bases of ``output``'s raw streams that exist: the one path, or for a templated output (``%p``,
    ``%h``, ``%n``, ``%q{VAR}``) those of its folder that fit the template (a bounded look)."""
    base = report_base(output)
    if "%" not in base:
        return [base] if os.path.lexists(base + STREAM_SUFFIX) else []
    folder, name = os.path.split(base)
    if "%" in folder:
        return []
    pattern = ""
    at = 0
    while at < len(name):
        if name[at] == "%" and at + 1 < len(name):
            if name[at + 1] == "%":
                pattern += "%"
            elif name[at + 1] == "q" and name[at + 2 : at + 3] == "{" and "}" in name[at:]:
                at = name.index("}", at) - 1
                pattern += "*"
            else:
                pattern += "*"
            at += 2
            continue
        pattern += "[" + name[at] + "]" if name[at] in "*?[" else name[at]
        at += 1
    try:
        entries = os.listdir(folder or ".")[:DIR_SCAN_MAX]
    except OSError:
        return []
    matched = fnmatch.filter(entries, pattern + STREAM_SUFFIX)
    return [os.path.join(folder, entry[: -len(STREAM_SUFFIX)]) for entry in sorted(matched)]


def temp_streams(uid: int | None, since: float | None) -> list[str]:
    """Nsight Systems' own raw streams (``TEMP_STREAM``) in ``TEMP_FOLDERS`` that ``uid`` owns and that were
    written since ``since`` (epoch seconds): an ``nsys profile`` from 2024 on collects into one of these and
    turns it into the report named by its ``-o`` at the end, removing it; one still there after its job is
    gone is a report never written. A bounded look per folder."""
    if uid is None or since is None:
        return []
    found = []
    test_folder = os.environ.get(TEST_TEMP_ENV)
    for folder in (test_folder,) if test_folder else TEMP_FOLDERS:
        try:
            entries = os.listdir(folder)[:DIR_SCAN_MAX]
        except OSError:
            continue
        for entry in sorted(fnmatch.filter(entries, TEMP_STREAM)):
            path = os.path.join(folder, entry)
            try:
                info = os.lstat(path)
            except OSError:
                continue
            if info.st_uid == uid and info.st_mtime >= since - TEMP_STREAM_SLACK_S:
                found.append(path)
    return found


def unfinished_reports(
    outputs: Iterable[Any], uid: int | None = None, since: float | None = None
) -> list[dict[str, Any]]:
    """The raw streams of these outputs (absolute ``output`` paths from a profiler's argv) whose report was
    never written: ``{"path": the .qdstrm, "dev", "inode", "uid", "size_bytes", "report": the .nsys-rep
    that is missing}``, at most ``MAX_REPORTS``; with the job's ``uid`` and the time it was first seen
    (``since``), Nsight Systems' own raw streams of the job's time too (``temp_streams``), each named by the
    report the job's profiler was to write."""
    outputs = list(outputs)
    found: list[dict[str, Any]] = []
    named = [o for o in outputs if isinstance(o, str) and o.startswith("/") and "%" not in o]
    for stream in temp_streams(uid, since):
        identity = file_identity(stream)
        if identity is not None:
            missing = report_base(named[0]) if named else stream[: -len(STREAM_SUFFIX)]
            identity["report"] = wire_text(missing + REPORT_SUFFIXES[0], 512)
            found.append(identity)
        if len(found) >= MAX_REPORTS:
            return found
    for output in outputs:
        if not isinstance(output, str) or not output.startswith("/"):
            continue
        for base in _stream_bases(output):
            identity = file_identity(base + STREAM_SUFFIX)
            if identity is not None and not _finished(base):
                identity["report"] = wire_text(base + REPORT_SUFFIXES[0], 512)
                found.append(identity)
            if len(found) >= MAX_REPORTS:
                return found
    return found


def still_unfinished(recorded: Iterable[Any]) -> list[dict[str, Any]]:
    """The recorded unfinished reports that are still the same file and still have no report beside them."""
    left = []
    for item in recorded:
        if not isinstance(item, dict) or not isinstance(item.get("path"), str):
            continue
        path = item["path"]
        if not path.endswith(STREAM_SUFFIX) or not path.startswith("/"):
            continue
        now = file_identity(path)
        same = now is not None and all(now[k] == item.get(k) for k in ("dev", "inode", "uid"))
        if same and now is not None and not _finished(path[: -len(STREAM_SUFFIX)]):
            now["report"] = wire_text(path[: -len(STREAM_SUFFIX)] + REPORT_SUFFIXES[0], 512)
            left.append(now)
    return left
