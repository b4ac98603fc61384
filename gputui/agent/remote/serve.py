"""The remote form: JSON lines on stdio, a hello, then a snapshot every memory interval, commands meanwhile.

``python3 -m gputui.agent`` locally, or the loader of ``gputui.transports.ssh.bundle`` over SSH
(``main``). After
the hello, stdin carries JSON-line commands and stdout JSON-line messages (``protocol``); the collector ends
within seconds once its client is gone, at any stage (``session.ClientSession``).
"""

from __future__ import annotations

import argparse
import gc
import json
import select
import sys
import threading
import time

from gputui.agent.args import finite_positive, seconds_in_range
from gputui.agent.collector import Agent
from gputui.agent.gpu import TELEMETRY_INTERVAL_S
from gputui.agent.protocol import (
    CMD_CONFIGURE,
    CMD_QUIT,
    ESCALATE_MAX_S,
    GPU_FITNESS,
    INTERVAL_MAX_S,
    INTERVAL_MIN_S,
    KERNEL_LOG,
    KILL_COMMANDS,
    LISTENING_PORTS,
    MEMORY_INTERVAL_S,
    PROBE_COMMAND,
    PROBE_DEADLINE_MAX_S,
    PROCESS_INTERVAL_S,
    PROCESSES_SAME,
    REMEMBERED,
    RESET_RUN_COMMAND,
    RESET_RUN_MAX_S,
    error_reply,
    snapshot_message,
)
from gputui.agent.remote.session import ClientSession
from gputui.agent.servers import ENDPOINT_GENERATE_MIN_INTERVAL_S

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any


class Writer:
    """Writes JSON lines from several threads, one whole line at a time.

    Under ``python3 -u`` stdout is a raw file, whose ``write`` may take only part of the data (a signal
    arriving mid-write, a non-blocking descriptor): the rest is written until the whole line, newline
    included, is out. A lost tail would glue this line to the next one on the client.
    """

    def __init__(self, stream: Any) -> None:
        self.stream = stream
        self.lock = threading.Lock()
        self.broken = False

    def write(self, message: dict[str, Any]) -> bool:
        data = (json.dumps(message, ensure_ascii=False, separators=(",", ":")) + "\n").encode(
            "utf-8", "backslashreplace"
        )
        with self.lock:
            if self.broken:
                return False
            try:
                view = memoryview(data)
                while view:
                    written = self.stream.write(view)
                    if written is None:  # a non-blocking descriptor that is full: wait until it drains
                        _wait_writable(self.stream)
                        continue
                    view = view[written:]
                self.stream.flush()
            except (OSError, ValueError):
                self.broken = True
                return False
        return True


def _wait_writable(stream: Any) -> None:
    try:
        select.select([], [stream.fileno()], [], 1.0)
    except (OSError, ValueError, AttributeError):
        time.sleep(0.01)


_ELIDED = ("processes", GPU_FITNESS)


def elide_unchanged_processes(snapshot: dict[str, Any], keep_fitness: bool = False) -> dict[str, Any]:
    """``snapshot`` without its process lists, marked ``"processes_same": true``.

    For a stream line whose ``processes_time`` is that of a line already sent: the client takes the lists
    over from that line (``model.HostSnapshot.from_dict``), so a memory-only sample does not carry (nor cost
    the parsing of) process lists that did not change. Each GPU's fitness goes with them, unless this sample
    read it (``keep_fitness``: a clean-slate check reads it with every memory sample, ``Agent._poll_gpus``).
    """
    out = dict(snapshot)
    del out["processes"]
    del out[LISTENING_PORTS]  # read with the process lists, so just as unchanged
    out.pop(KERNEL_LOG, None)  # the client keeps the last one with the lists
    out.pop(REMEMBERED, None)  # and so are the remembered jobs
    out[PROCESSES_SAME] = True
    elided = ("processes",) if keep_fitness else _ELIDED
    out["gpus"] = [{k: v for k, v in gpu.items() if k not in elided} for gpu in snapshot["gpus"]]
    return out


def fitness_read_at(snapshot: dict[str, Any]) -> float | None:
    """When the sample's GPU fitness was last read (the newest ``read_time``), None where none was."""
    times = [
        gpu[GPU_FITNESS].get("read_time")
        for gpu in snapshot.get("gpus") or ()
        if isinstance(gpu, dict) and isinstance(gpu.get(GPU_FITNESS), dict)
    ]
    return max((t for t in times if isinstance(t, (int, float))), default=None)


def collect_from_now() -> None:
    """Turn the cyclic garbage collector on for the stream (the boot stage starts with it off): what the
    start made lives until exit, so it is frozen out of every later collection first."""
    gc.freeze()
    gc.enable()


def serve(session: ClientSession, stdout_binary: Any, agent: Agent, elide_unchanged: bool = False) -> None:
    """The remote loop: hello, then a snapshot every ``memory_interval_s``; commands handled meanwhile.

    Commands come from ``session.commands``; each of ``KILL_COMMANDS`` runs on its own thread (an
    escalation takes seconds) while the others are answered in order. Returns once the client is gone
    (``session.gone``): EOF, ``quit`` or a broken stdout; ``ClientSession.leave`` then lets the kill
    operations under way finish (``Agent.wait_for_escalations``). With ``elide_unchanged``, a snapshot
    line whose process lists are the ones the previous line carried leaves them out
    (``elide_unchanged_processes``).
    """
    writer = Writer(stdout_binary)
    sent_processes_time: float | None = None
    sent_fitness_at: float | None = None

    def run_command(command: dict[str, Any]) -> None:
        writer.write(agent.handle(command))

    def dispatch() -> None:
        while True:
            line = session.commands.get()
            if line is None:
                return
            try:
                command = json.loads(line.decode("utf-8", "replace"))
            except ValueError:
                writer.write(error_reply(None, "not a JSON line"))
                continue
            name = command.get("cmd") if isinstance(command, dict) else None
            if name == CMD_QUIT:
                writer.write(agent.handle(command))
                session.client_gone("quit")
                return
            if name in KILL_COMMANDS:
                from gputui.agent.kill.operation import KILL_CONFIRM_S

                thread = threading.Thread(
                    target=run_command, args=(command,), name="gputui-kill", daemon=True
                )
                thread.start()
                escalate_s = finite_positive(command.get("escalate_s")) or 0.0
                session.pending(thread, min(escalate_s, ESCALATE_MAX_S) + KILL_CONFIRM_S + 5.0)
                continue
            if name == PROBE_COMMAND:  # seconds, up to its deadline: the samples go on meanwhile
                thread = threading.Thread(
                    target=run_command, args=(command,), name="gputui-probe", daemon=True
                )
                thread.start()
                session.pending(thread, PROBE_DEADLINE_MAX_S + 5.0)
                continue
            if name == RESET_RUN_COMMAND:  # minutes: a reset finishes (and restores) even if the client goes
                thread = threading.Thread(
                    target=run_command, args=(command,), name="gputui-reset", daemon=True
                )
                thread.start()
                session.pending(thread, RESET_RUN_MAX_S)
                continue
            run_command(command)
            if name == CMD_CONFIGURE:
                session.wake.set()

    if not writer.write(agent.hello()):
        session.client_gone("stdout closed")
        return
    threading.Thread(target=dispatch, name="gputui-commands", daemon=True).start()
    exited = False
    while not session.gone.is_set():
        started = time.monotonic()
        try:
            snapshot = agent.sample(force_processes=exited)
        except Exception as exc:  # a collector bug must not end the stream: report it as the host's error
            snapshot = agent.error_snapshot(f"collector error: {type(exc).__name__}: {exc}")
        listed_at = snapshot.get("processes_time")
        read_at = fitness_read_at(snapshot)
        if elide_unchanged and listed_at is not None and listed_at == sent_processes_time:
            snapshot = elide_unchanged_processes(snapshot, keep_fitness=read_at != sent_fitness_at)
        sent_processes_time = listed_at
        sent_fitness_at = read_at
        if not writer.write(snapshot_message(snapshot)):
            session.client_gone("stdout closed")
            return
        if not gc.isenabled():
            collect_from_now()
        exited = False
        while not session.gone.is_set() and not exited:
            left = started + agent.memory_interval_s - time.monotonic()
            if left <= 0:
                break
            exited = agent.pause(left, session.wake)  # a GPU holder's exit is sampled at once
            session.wake.clear()


def build_arg_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="gputui-agent", description="gputui collector (JSON lines on stdio)"
    )
    parser.add_argument("--target", default="local")
    parser.add_argument("--read-only", action="store_true")
    parser.add_argument(
        "--interval", type=float, default=MEMORY_INTERVAL_S, help="memory sample interval, seconds"
    )
    parser.add_argument(
        "--process-interval", type=float, default=PROCESS_INTERVAL_S, help="process sample interval, seconds"
    )
    parser.add_argument(
        "--telemetry-interval",
        type=float,
        default=TELEMETRY_INTERVAL_S,
        help="seconds between utilisation/temperature/power reads (0: every sample)",
    )
    parser.add_argument(
        "--health", action="append", default=[], metavar="URL", help="health URL to probe (repeatable)"
    )
    parser.add_argument(
        "--health-generate",
        action="store_true",
        help="also probe generating endpoints (/health_generate), at most every "
        f"{ENDPOINT_GENERATE_MIN_INTERVAL_S:g} s",
    )
    parser.add_argument(
        "--metrics",
        action="append",
        default=[],
        metavar="URL",
        help="server metrics URL read beside the health URL of its origin (repeatable)",
    )
    parser.add_argument("--no-discover", action="store_true", help="do not probe launchers' /health URLs")
    parser.add_argument(
        "--no-psutil", action="store_true", help="read /proc directly even if psutil is present"
    )
    parser.add_argument("--no-pynvml", action="store_true", help="use nvidia-smi even if pynvml is present")
    parser.add_argument("--once", action="store_true", help="print one full snapshot as JSON and exit")
    parser.add_argument(
        "--elide-unchanged",
        action="store_true",
        help="leave unchanged process lists out of stream lines (the client keeps the last ones)",
    )
    return parser


def main(argv: list[str] | None = None) -> int:
    """Entry point of the remote form; returns the exit status (the served form exits in ``leave``)."""
    args = build_arg_parser().parse_args(argv)
    for name in ("interval", "process_interval"):
        if seconds_in_range(getattr(args, name), INTERVAL_MIN_S, INTERVAL_MAX_S) is None:
            sys.stderr.write(
                "gputui-agent: --{} must be a number of seconds from {:g} to {:g}\n".format(
                    name.replace("_", "-"), INTERVAL_MIN_S, INTERVAL_MAX_S
                )
            )
            return 2
    if not (finite_positive(args.telemetry_interval) is not None or args.telemetry_interval == 0):
        sys.stderr.write("gputui-agent: --telemetry-interval must be 0 or a positive number\n")
        return 2
    session: ClientSession | None = None
    if not args.once:
        # Before anything slow (NVML's start-up, nvidia-smi's first block): a client gone already is noticed.
        session = ClientSession(getattr(sys.stdin, "buffer", sys.stdin))
        session.start()
    try:
        agent = Agent(
            target=args.target,
            read_only=args.read_only,
            memory_interval_s=args.interval,
            process_interval_s=args.process_interval,
            health_urls=args.health,
            metrics_urls=args.metrics,
            discover_health=not args.no_discover,
            health_generate=args.health_generate,
            use_psutil=not args.no_psutil,
            use_pynvml=not args.no_pynvml,
            telemetry_interval_s=args.telemetry_interval,
        )
    except ValueError as exc:
        sys.stderr.write(f"gputui-agent: {exc}\n")
        return 2
    stdout = getattr(sys.stdout, "buffer", sys.stdout)
    if session is None:
        try:
            Writer(stdout).write(agent.sample(force_processes=True))
            return 0
        finally:
            agent.close()
    session.agent = agent
    try:
        serve(session, stdout, agent, elide_unchanged=args.elide_unchanged)
    except KeyboardInterrupt:
        session.client_gone("interrupted")
    session.leave()
    return 0  # not reached: leave() exits
