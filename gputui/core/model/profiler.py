"""A process's profiler mark (``protocol.PROCESS_PROFILER``), read off the wire: whether it is a profiler
(``nsys profile``, ``ncu``), carries one's injection in its environment, or could not be looked at.

Every field is checked and bounded on the way in (the collector may not be gputui's); text is made visible.
"""

from __future__ import annotations

from gputui.agent.protocol import DAEMON, TOOLS, VIA_ARGV, VIA_ENVIRON, VIA_UNREADABLE
from gputui.core.model.record import Record
from gputui.core.model.wire import opt_safe
from gputui.core.text import SafeText, fit

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

OPTION_CHARS = 160
"""An option's value as a finding shows it (an output path, trace kinds)."""
MAX_KEYS = 3

TOOL_NAMES = {
    "nsys": "Nsight Systems",
    "ncu": "Nsight Compute",
    "cupti": "a CUPTI library",
    "tool": "a CUDA tool library",
}
"""How a sentence names each profiler."""


def _text(value: Any, limit: int = OPTION_CHARS) -> SafeText | None:
    text = opt_safe(value) if isinstance(value, str) else None
    return None if text is None else fit(text, limit)


class ProfilerMark(Record):
    """What the collector found of a profiler on one process of a GPU job.

    Attributes:
        tool: ``nsys``, ``ncu``, ``cupti`` or ``tool`` (a library an injection variable names that is none
            of those); None: not known (``via`` unreadable).
        via: ``argv`` (the process is the profiler), ``environ`` (it carries the profiler's injection) or
            ``unreadable`` (its environment could not be read: another user's process).
        command: The profiler's subcommand (``profile``, ``launch``; ``daemon`` for its agent or launcher).
        trace: The trace kinds it was given (``--trace``/``-t``), None: nsys's default.
        cuda_graph_trace: ``--cuda-graph-trace`` (``graph`` or ``node``).
        output: The report's path (made absolute by the collector where it could), None: the default.
        capture_range: ``--capture-range`` (collection waits for the application to start it).
        keys: The environment variables that carry the injection.
        library: The profiler library they name, where it is one gputui knows.
    """

    tool: str | None = None
    via: str = VIA_ARGV
    command: SafeText | None = None
    trace: SafeText | None = None
    cuda_graph_trace: SafeText | None = None
    output: SafeText | None = None
    capture_range: SafeText | None = None
    keys: tuple[SafeText, ...] = ()
    library: SafeText | None = None

    @property
    def known(self) -> bool:
        """A profiler was found (not merely an environment that could not be read)."""
        return self.tool is not None and self.via != VIA_UNREADABLE

    @property
    def unreadable(self) -> bool:
        return self.via == VIA_UNREADABLE

    @property
    def is_daemon(self) -> bool:
        """A profiler's helper (``nsys --start-agent``, ``nsys-launcher``): its job's profiler left it."""
        return self.via == VIA_ARGV and self.command == DAEMON

    @property
    def nvtx(self) -> bool | None:
        """Whether NVTX ranges are traced: in its trace kinds (nsys traces them by default); None: not an
        nsys run."""
        if self.tool != "nsys" or self.via != VIA_ARGV:
            return None
        return self.trace is None or "nvtx" in self.trace.split(",")

    @classmethod
    def from_dict(cls, data: Any) -> ProfilerMark | None:
        if not isinstance(data, dict):
            return None
        via = data.get("via")
        if via not in (VIA_ARGV, VIA_ENVIRON, VIA_UNREADABLE):
            return None
        tool = data.get("tool")
        if via == VIA_UNREADABLE:
            return cls(tool=None, via=via)
        if tool not in TOOLS:
            return None
        keys = data.get("keys")
        return cls(
            tool=tool,
            via=via,
            command=_text(data.get("command"), 16),
            trace=_text(data.get("trace")),
            cuda_graph_trace=_text(data.get("cuda_graph_trace"), 16),
            output=_text(data.get("output")),
            capture_range=_text(data.get("capture_range"), 32),
            keys=tuple(
                text
                for text in (_text(k, 32) for k in (keys if isinstance(keys, list) else ())[:MAX_KEYS])
                if text
            ),
            library=_text(data.get("library"), 64),
        )


def profiler_name(mark: ProfilerMark) -> str:
    """ "Nsight Systems (nsys profile)", "Nsight Compute (ncu)", "a CUPTI library": the profiler's name."""
    name = TOOL_NAMES.get(mark.tool or "", "a profiler")
    if mark.via != VIA_ARGV:
        return name
    if mark.tool == "nsys":
        return f"{name} (nsys {'agent' if mark.is_daemon else mark.command or 'profile'})"
    return f"{name} ({mark.tool})"


def profiler_options(mark: ProfilerMark) -> str:
    """The options that matter, one clause: "trace cuda,nvtx (NVTX on), cuda-graph-trace node, output
    /tmp/x"; for an injection, the variables that carry it and the library they name."""
    if mark.via == VIA_ENVIRON:
        carried = "+".join(mark.keys) or "its environment"
        return f"{carried} set" + (f" to {mark.library}" if mark.library else "")
    parts = []
    if mark.tool == "nsys" and not mark.is_daemon:
        trace = f"trace {mark.trace}" if mark.trace else "nsys's default trace"
        parts.append(trace + (" (NVTX on)" if mark.nvtx else ""))
        if mark.cuda_graph_trace:
            parts.append(f"cuda-graph-trace {mark.cuda_graph_trace}")
        if mark.capture_range:
            parts.append(f"capture-range {mark.capture_range}")
    if mark.output:
        parts.append(f"output {mark.output}")
    return ", ".join(parts)
