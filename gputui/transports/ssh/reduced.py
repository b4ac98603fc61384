"""Monitoring a host that has no python3: nvidia-smi and ps output from a fixed POSIX sh loop.

The loop prints marked sections (``reduced_command``); ``ReducedStream`` reads them with the collector's own
nvidia-smi parsers (``gputui.agent.gpu.smiparse``) into snapshots of mode "ps" (``protocol.MODE_REDUCED``).
It answers the commands it can from its stream (``configure``, ``sample``, ``calibrate``) and refuses the
rest: nothing can be killed this way.
"""

from __future__ import annotations

import re
import time
from pathlib import Path

from gputui.agent import protocol
from gputui.agent.argv_secrets import redact_argv
from gputui.agent.gpu.smiparse import (
    SMI_QUERY_APPS,
    SMI_QUERY_GPU,
    parse_smi_apps_output,
    smi_run,
)
from gputui.agent.proc.proctree import related_map, walk
from gputui.agent.wire import WIRE_CMDLINE_BYTES
from gputui.core.link import LinkError, LinkOptions
from gputui.core.model import HostSnapshot
from gputui.transports.ssh.errors import PythonTooOld, python_too_old
from gputui.transports.ssh.payload import _number_arg
from gputui.transports.ssh.stream import PREAMBLE, PYTHON_MISSING_STATUS, CollectorStream

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from gputui.transports.ssh.interfaces import Pipe
    from gputui.transports.ssh.stream import Decoded

REDUCED_PS_LINES_CAP = 200_000
"""Most lines taken from one section of a sample (a runaway host must not eat our memory)."""
REDUCED_PS_LINE_CHARS = WIRE_CMDLINE_BYTES
"""Most characters kept of one ``ps`` line: a process's command line is cut where the collector cuts it, and
marked ``cmdline_truncated``."""
_NONCE_RE = re.compile(r"[0-9a-f]{8,64}")


def reduced_command(nonce: str, options: LinkOptions) -> str:
    """The reduced collector: a fixed POSIX sh loop (no python3 needed) printing marked sections.

    Only fixed text, a hex nonce made here and a validated number go into it. Sections per sample:
    ``gpus`` (nvidia-smi --query-gpu CSV, then its exit status), ``apps`` (--query-compute-apps CSV), ``ps``
    (``pid ppid stat user args``), ``end``.
    """
    if not _NONCE_RE.fullmatch(nonce):
        raise LinkError("reduced mode: bad marker")
    interval = _number_arg(options.memory_interval_s, "interval")
    smi_format = "--format=csv,noheader,nounits"
    script = (
        f"M=@gputui-{nonce}; "
        'echo "$M boot $(cat /proc/sys/kernel/random/boot_id 2>/dev/null)"; '
        'echo "$M host $(cat /proc/sys/kernel/hostname 2>/dev/null)"; '
        "while :; do "
        'echo "$M gpus"; '
        f"nvidia-smi --query-gpu={SMI_QUERY_GPU} {smi_format} 2>&1; "
        'echo "$M rc $?"; '
        'echo "$M apps"; '
        f"nvidia-smi --query-compute-apps={SMI_QUERY_APPS} {smi_format} 2>/dev/null; "
        'echo "$M ps"; '
        "ps -eo pid=,ppid=,stat=,user=,args= 2>/dev/null; "
        'echo "$M end"; '
        f"sleep {interval} || exit 0; "
        "done"
    )
    if "'" in script:  # the whole script travels inside one pair of single quotes
        raise LinkError("reduced mode: script would need quoting")
    return f"sh -c '{script}'"


class ReducedStream(CollectorStream):
    """The reduced collector's marked sections as snapshots (mode "ps": monitoring only).

    Args:
        nonce: The hex word of ``reduced_command``'s markers (lines without it are data, never markers).
        too_old: Why python3 cannot run the collector when it is there but too old (``PythonTooOld``); None:
            there is no python3.
    """

    quit_line = None
    failed_start = "no python3 on host, and the reduced collector (sh) failed"

    def __init__(
        self,
        target: str,
        pipe: Pipe,
        nonce: str,
        *,
        stale_after_s: float,
        first_grace_s: float,
        too_old: PythonTooOld | None = None,
    ) -> None:
        super().__init__(target, pipe, stale_after_s=stale_after_s, first_grace_s=first_grace_s)
        self.too_old = too_old
        self.needs = "python3 on the host"
        """What a refused command needs, named with the version the host has when its python is too old."""
        if too_old is not None:
            problem = python_too_old(too_old.version, too_old.needed)
            self.failed_start = f"{problem}, and the reduced collector (sh) failed"
            self.needs = f"python3 {too_old.needed} or newer on the host (it has {too_old.version})"
        self.marker = f"@gputui-{nonce} "
        self.boot_id: str | None = None
        self.hostname: str | None = None
        self.section: str | None = None
        self.lines: dict[str, list[str]] = {"gpus": [], "apps": [], "ps": []}
        self.smi_status: int | None = None
        self.started = False

    def request(self, command: dict[str, Any], timeout_s: float) -> dict[str, Any]:
        """The commands a monitoring-only host can answer from its stream; LinkError for the others."""
        name = str(command.get("cmd"))
        if name == protocol.CMD_CONFIGURE:
            return {}
        if name not in (protocol.CMD_SAMPLE, protocol.CMD_CALIBRATE):
            raise LinkError(f"{self.target}: {name} needs {self.needs} (reduced mode: monitoring only)")
        deadline = time.monotonic() + max(0.0, timeout_s)
        late = f"no reply to {name} within {timeout_s:.1f} s"
        snapshot = self._wait_for(lambda: self._latest, deadline, late)
        if name == protocol.CMD_SAMPLE:
            return {"snapshot": snapshot.to_dict()}
        used = {g.key: g.memory_used_mib for g in snapshot.gpus if g.memory_used_mib is not None}
        return {"memory_used_mib": used}

    def decode(self, line: bytes) -> Decoded:
        text = line.decode("utf-8", "replace")
        if not text.startswith(self.marker):
            if not self.started:
                return PREAMBLE
            if self.section is not None:
                bucket = self.lines[self.section]
                if len(bucket) >= REDUCED_PS_LINES_CAP:
                    too_many = f"reduced collector sent over {REDUCED_PS_LINES_CAP} lines"
                    raise LinkError(f"{self.target}: {too_many}")
                bucket.append(text[: REDUCED_PS_LINE_CHARS + 1])  # one more: reduced_processes sees the cut
            return None
        word, _, rest = text[len(self.marker) :].partition(" ")
        if word == "boot":
            self.boot_id = rest.strip() or None
            return None
        if word == "host":
            self.hostname = rest.strip() or None
            self.started = True
            return self._hello_message()
        if word in self.lines:
            self.section = word
            self.lines[word] = []
            return None
        if word == "rc":
            self.section = None
            try:
                self.smi_status = int(rest.strip())
            except ValueError:
                self.smi_status = None
            return None
        if word == "end":
            self.section = None
            return self._snapshot()
        return None

    def _hello_message(self) -> dict[str, Any]:
        old = self.too_old
        return protocol.hello(
            protocol.MODE_REDUCED,
            self.boot_id,
            self.hostname,
            python=None if old is None else old.version,
            reduced=True,
            reduced_reason="no python3" if old is None else python_too_old(old.version, old.needed),
        )

    def _why(self) -> str:
        old = self.too_old
        return "no python3" if old is None else python_too_old(old.version, old.needed)

    def _snapshot(self) -> HostSnapshot:
        now = time.time()
        gpu_text = "\n".join(self.lines["gpus"])
        error: str | None = None
        gpus: list[dict[str, Any]] = []
        if self.smi_status == PYTHON_MISSING_STATUS:
            error = f"reduced mode ({self._why()}): nvidia-smi not found on host"
        else:
            # A non-zero exit (15: a GPU is lost; 255: one in "Unknown Error") follows the lines of the
            # GPUs nvidia-smi could still read: they stand, and the one it could not open is an error row.
            gpus, smi_error = smi_run(-1 if self.smi_status is None else self.smi_status, gpu_text)
            if smi_error is not None:
                error = f"reduced mode ({self._why()}): " + smi_error
        apps = parse_smi_apps_output("\n".join(self.lines["apps"]))
        held: dict[int, dict[int, int]] = {}
        for gpu in gpus:
            listed = apps.get(str(gpu.get("uuid"))) or []
            gpu["processes"] = listed
            for app in listed:
                if app.get("used_mib") is not None:
                    held.setdefault(int(app["pid"]), {})[int(gpu["index"])] = int(app["used_mib"])
        return HostSnapshot.from_dict(
            protocol.snapshot(
                self.target,
                self.hostname,
                self.boot_id,
                now,
                protocol.MODE_REDUCED,
                gpus=gpus,
                processes=reduced_processes(self.lines["ps"], held),
                error=error,
                processes_time=now,
            )
        )


def reduced_processes(ps_lines: list[str], held: dict[int, dict[int, int]]) -> list[dict[str, Any]]:
    """GPU processes, their ancestors and descendants, and zombie / D-state processes from ``ps`` lines.

    ``args`` is split on whitespace (ps joins argv with spaces), so cmdlines are approximate in this mode.
    """
    table: dict[int, dict[str, Any]] = {}
    for line in ps_lines:
        truncated = len(line) > REDUCED_PS_LINE_CHARS
        words = line[:REDUCED_PS_LINE_CHARS].split(None, 4)
        if len(words) < 4 or not words[0].isdigit() or not words[1].isdigit():
            continue
        args = redact_argv(words[4].split()) if len(words) > 4 else []
        table[int(words[0])] = {
            "pid": int(words[0]),
            "ppid": int(words[1]),
            "state": words[2][:1] or None,
            "user": words[3],
            "name": Path(args[0]).name if args else None,
            "cmdline": args,
            "cmdline_truncated": truncated,
        }
    wanted = {pid for pid, row in table.items() if row["state"] in ("Z", "D")}
    parentage = related_map((pid, row["ppid"], None) for pid, row in table.items())
    wanted.update(pid for pid, _via, _depth in walk(held, parentage))
    for pid in list(held):
        parent = table.get(pid, {}).get("ppid")
        while parent and parent > 1 and parent not in wanted and parent in table:
            wanted.add(parent)
            parent = table[parent]["ppid"]
    rows = []
    for pid in sorted(wanted):
        row = dict(table.get(pid) or {"pid": pid})
        row["gpu_memory_mib"] = {str(k): v for k, v in held.get(pid, {}).items()}
        rows.append(row)
    return rows
