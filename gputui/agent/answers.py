"""The collector's commands: checking what a client asks for, and answering it (``protocol.COMMANDS``)."""

from __future__ import annotations

from gputui.agent.args import CommandError, seconds_in_range
from gputui.agent.proc.details import ProcDetails
from gputui.agent.proc.procfs import read_stat
from gputui.agent.protocol import (
    CMD_CALIBRATE,
    CMD_CONFIGURE,
    CMD_HEALTH,
    CMD_HELLO,
    CMD_PROCESS,
    CMD_QUIT,
    CMD_SAMPLE,
    FITNESS_INTERVAL_KEY,
    INTERVAL_MAX_S,
    INTERVAL_MIN_S,
    KILL_ABANDON_COMMAND,
    KILL_COMMAND,
    KILL_WAIT_COMMAND,
    LEFTOVERS_COMMANDS,
    LEFTOVERS_REMOVE_COMMAND,
    LEFTOVERS_SCAN_COMMAND,
    PROBE_BUFFER_MAX_MIB,
    PROBE_BUFFER_MIB,
    PROBE_BUFFER_MIN_MIB,
    PROBE_COMMAND,
    PROBE_DEADLINE_MAX_S,
    PROBE_DEADLINE_MIN_S,
    PROBE_DEADLINE_S,
    RESET_PLAN_COMMAND,
    RESET_RUN_COMMAND,
    error_reply,
    reply,
)
from gputui.agent.servers.messages import endpoint_config
from gputui.agent.wire import PROCESS_TEXT_BYTES, wire_cmdline, wire_text

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from gputui.agent.host import Agent


def handle(agent: Agent, command: Any) -> dict[str, Any]:
    """Run one command on ``agent``; returns the reply message (never raises)."""
    command_id = command.get("id") if isinstance(command, dict) else None
    try:
        if not isinstance(command, dict):
            raise CommandError("a command must be a JSON object")
        return reply(command_id, _answer(agent, command))
    except CommandError as exc:
        return error_reply(command_id, str(exc))
    except Exception as exc:  # a bug must not kill the collector: report it as one line
        return error_reply(command_id, wire_text(f"{type(exc).__name__}: {exc}", 1024) or "")


def _answer(agent: Agent, command: dict[str, Any]) -> dict[str, Any]:
    name = command.get("cmd")
    if name == CMD_CONFIGURE:
        return configure(agent, command)
    if name == CMD_SAMPLE:
        return {"snapshot": agent.sample(force_processes=True)}
    if name in (KILL_COMMAND, KILL_WAIT_COMMAND, KILL_ABANDON_COMMAND):
        return agent.kills.handle(name, command)
    if name in LEFTOVERS_COMMANDS:
        return leftovers(agent, name, command)
    if name in (RESET_PLAN_COMMAND, RESET_RUN_COMMAND):
        return reset(agent, name, command)
    if name == PROBE_COMMAND:
        return probe(agent, command)
    if name == CMD_CALIBRATE:
        return calibrate(agent)
    if name == CMD_PROCESS:
        return process_text(command, agent.use_psutil)
    if name == CMD_HEALTH:
        return health(agent, command)
    if name == CMD_HELLO:
        return agent.hello()
    if name == CMD_QUIT:
        return {}
    raise CommandError(f"unknown command {name!r}")


ENDPOINT_QUERY_KEYS = frozenset({"id", "cmd", "discover_now"})
"""A ``health`` command with no other key changes no setting: it only asks."""


def health(agent: Agent, command: dict[str, Any]) -> dict[str, Any]:
    """The ``health`` command. Asking a collector that probes nothing (none configured, no launcher found
    now) answers its idle settings without loading the prober."""
    if command.get("discover_now") is True:
        agent.discover_now()
    if agent.probing or not ENDPOINT_QUERY_KEYS.issuperset(command):
        try:
            return agent.endpoints.handle_command(dict(command, discover_now=False))
        except ValueError as exc:
            raise CommandError(str(exc)) from None
    return {"config": idle_health_config(agent.discover_health), "samples": []}


def idle_health_config(discover: bool) -> dict[str, Any]:
    """The settings of a prober that was never configured (``EndpointProber``'s defaults)."""
    from gputui.agent.servers import (
        ENDPOINT_DEFAULT_DEADLINE_S,
        ENDPOINT_DEFAULT_INTERVAL_S,
        ENDPOINT_GENERATE_MIN_INTERVAL_S,
    )

    return endpoint_config(
        [],
        [],
        False,
        discover,
        ENDPOINT_DEFAULT_INTERVAL_S,
        ENDPOINT_DEFAULT_DEADLINE_S,
        ENDPOINT_GENERATE_MIN_INTERVAL_S,
    )


def configure(agent: Agent, command: dict[str, Any]) -> dict[str, Any]:
    """Intervals, and the health settings the SSH link sends right after the hello.

    Keys (all optional): memory_interval_s, process_interval_s, fitness_interval_s (how often the GPUs'
    fitness is read; null: the default), watch_exits (bool: wait on the GPU holders' exits between samples,
    ``Agent.pause``), health_urls and metrics_urls (lists of URLs), discover_health (bool), health_generate
    (bool). A bad value changes nothing.
    """
    watch_exits = command.get("watch_exits")
    if watch_exits is not None and not isinstance(watch_exits, bool):
        raise CommandError("watch_exits must be true or false")
    updates: dict[str, float] = {}
    for key in ("memory_interval_s", "process_interval_s"):
        if key in command and command[key] is not None:
            value = seconds_in_range(command[key], INTERVAL_MIN_S, INTERVAL_MAX_S)
            if value is None:
                raise CommandError(
                    f"{key} must be a number of seconds from {INTERVAL_MIN_S:g} to {INTERVAL_MAX_S:g}"
                )
            updates[key] = value
    fitness_interval: float | None = None
    if FITNESS_INTERVAL_KEY in command:
        from gputui.agent.gpu.fitness import FITNESS_INTERVAL_S

        raw = command[FITNESS_INTERVAL_KEY]
        fitness_interval = (
            FITNESS_INTERVAL_S if raw is None else seconds_in_range(raw, INTERVAL_MIN_S, INTERVAL_MAX_S)
        )
        if fitness_interval is None:
            raise CommandError(
                f"{FITNESS_INTERVAL_KEY} must be null or a number of seconds from {INTERVAL_MIN_S:g} to"
                f" {INTERVAL_MAX_S:g}"
            )
    health_keys = ("health_urls", "metrics_urls", "discover_health", "health_generate")
    if any(command.get(key) is not None for key in health_keys):
        try:
            # Validates everything before changing anything; the intervals are applied only after.
            config = agent.endpoints.configure(
                urls=command.get("health_urls"),
                metrics_urls=command.get("metrics_urls"),
                discover=command.get("discover_health"),
                generate=command.get("health_generate"),
            )
        except ValueError as exc:
            raise CommandError(f"health: {exc}") from None
        agent.health_urls = tuple(config["urls"])
        agent.discover_health = bool(config["discover"])
    agent.set_intervals(updates.get("memory_interval_s"), updates.get("process_interval_s"), watch_exits)
    if fitness_interval is not None:
        agent.fitness_monitor.interval_s = fitness_interval
    return {}


def process_text(command: dict[str, Any], use_psutil: bool) -> dict[str, Any]:
    """The ``process`` command: the whole command line of one process, which snapshots cut.

    ``{"cmd": "process", "pid": P, "start_ticks": T}``; read fresh from /proc, and only if the pid still
    belongs to the process that started at T. The command line is cut at ``PROCESS_TEXT_BYTES`` (then
    ``cmdline_truncated`` is true).
    """
    pid = command.get("pid")
    ticks = command.get("start_ticks")
    if isinstance(pid, bool) or not isinstance(pid, int) or pid <= 0:
        raise CommandError("pid must be a positive integer")
    if isinstance(ticks, bool) or not isinstance(ticks, int):
        raise CommandError("start_ticks must be an integer")
    stat = read_stat(pid)
    if stat is None:
        raise CommandError(f"no such process: {pid}")
    if stat.start_ticks != ticks:
        raise CommandError(f"process changed: pid {pid} now belongs to another process")
    details = ProcDetails(use_psutil)
    uid, full = details.read(pid)
    after = read_stat(pid)
    if after is None or after.start_ticks != ticks or full is None:  # it exited while being read
        raise CommandError(f"no such process: {pid}")
    cmdline, truncated, _bytes = wire_cmdline(full, PROCESS_TEXT_BYTES)
    return {
        "pid": pid,
        "start_ticks": ticks,
        "name": stat.name,
        "state": stat.state,
        "uid": uid,
        "user": details.user_name(uid),
        "cmdline": cmdline,
        "cmdline_truncated": truncated,
    }


def calibrate(agent: Agent) -> dict[str, Any]:
    """Each GPU's used memory now, by its key (uuid, else ``index:N``): the idle baselines of a host."""
    snapshot = agent.sample(force_processes=False)
    used: dict[str, int] = {}
    for gpu in snapshot["gpus"]:
        if gpu.get("memory_used_mib") is None:
            continue
        used[gpu.get("uuid") or f"index:{gpu['index']}"] = gpu["memory_used_mib"]
    return {"memory_used_mib": used}


def reset(agent: Agent, name: str, command: dict[str, Any]) -> dict[str, Any]:
    """``reset_plan`` (reads only) and ``reset_run`` (``reset_run.run_reset``)."""
    words = command.get("gpus")
    if words is not None and (not isinstance(words, list) or not all(isinstance(w, str) for w in words)):
        raise CommandError("gpus must be a list of GPU indexes or UUIDs, or null for every GPU")
    if name == RESET_PLAN_COMMAND:
        from gputui.agent.reset.plan import make_plan

        try:
            return {
                "plan": dict(
                    make_plan(words, agent.pid, agent.read_only, agent.uses_nvml), boot_id=agent.boot_id
                )
            }
        except ValueError as exc:
            raise CommandError(str(exc)) from None
    from gputui.agent.reset.run import ResetRefused, run_reset

    try:
        return run_reset(agent, command)
    except ResetRefused as exc:
        raise CommandError(str(exc)) from None


def probe(agent: Agent, command: dict[str, Any]) -> dict[str, Any]:
    """``probe``: does each GPU (all, or those named) take work? After any kill under way (``gpu.probe``)."""
    words = command.get("gpus")
    if words is not None and (not isinstance(words, list) or not all(isinstance(w, str) for w in words)):
        raise CommandError("gpus must be a list of GPU indexes or UUIDs, or null for every GPU")
    deadline_s = seconds_in_range(
        command.get("deadline_s", PROBE_DEADLINE_S),
        PROBE_DEADLINE_MIN_S,
        PROBE_DEADLINE_MAX_S,
    )
    if deadline_s is None:
        raise CommandError(
            f"deadline_s must be a number of seconds from {PROBE_DEADLINE_MIN_S:g} to"
            f" {PROBE_DEADLINE_MAX_S:g}"
        )
    buffer_mib = command.get("buffer_mib", PROBE_BUFFER_MIB)
    if (
        isinstance(buffer_mib, bool)
        or not isinstance(buffer_mib, int)
        or not PROBE_BUFFER_MIN_MIB <= buffer_mib <= PROBE_BUFFER_MAX_MIB
    ):
        raise CommandError(
            f"buffer_mib must be a whole number of MiB from {PROBE_BUFFER_MIN_MIB} to {PROBE_BUFFER_MAX_MIB}"
        )
    force = command.get("force", False)
    if not isinstance(force, bool):
        raise CommandError("force must be true or false")
    return agent.probe(words, deadline_s, buffer_mib, force)


def _dicts(command: dict[str, Any], key: str) -> list[dict[str, Any]]:
    value = command.get(key) or []
    if not isinstance(value, list) or not all(isinstance(item, dict) for item in value):
        raise CommandError(f"{key} must be a list of objects")
    return value


def leftovers(agent: Agent, name: str, command: dict[str, Any]) -> dict[str, Any]:
    """The leftovers of killed jobs in /dev/shm and their MPS daemons (``agent.proc.leftovers``)."""
    from gputui.agent.proc import leftovers as found

    if name == LEFTOVERS_SCAN_COMMAND:
        pids = command.get("pids")
        if not isinstance(pids, list) or not all(
            isinstance(p, int) and not isinstance(p, bool) for p in pids
        ):
            raise CommandError("pids must be a list of process ids")
        return found.scan(pids)
    if name == LEFTOVERS_REMOVE_COMMAND:
        try:
            segments, reports = _dicts(command, "segments"), _dicts(command, "reports")
            return {"results": found.remove(segments, agent.read_only, reports)}
        except PermissionError as exc:
            raise CommandError(str(exc)) from None
    return found.check(_dicts(command, "segments"), _dicts(command, "mps"), _dicts(command, "reports"))
