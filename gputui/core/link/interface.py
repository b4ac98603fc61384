"""The interface every host transport speaks: a stream of snapshots in, commands out.

A link talks to one host's collector (``gputui.agent``) in-process (local), over SSH, or to a simulated
host. All methods may block and are called from worker threads, never from the UI's event loop.
"""

from __future__ import annotations

import abc
import time

from gputui.agent.protocol import (
    CMD_CONFIGURE,
    CMD_HEALTH,
    CMD_PROCESS,
    CMD_SAMPLE,
    FITNESS_INTERVAL_KEY,
    MEMORY_INTERVAL_S,
    PROBE_COMMAND,
    PROCESS_INTERVAL_S,
)
from gputui.core.model import HostSnapshot, ProbeReport, Proc, Record, field, replace, safe_list
from gputui.core.text import visible

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

SSH_CLIENTS = ("paramiko", "openssh", "auto", "config")
"""What reaches remote hosts: paramiko (built in), openssh (the system ``ssh`` client), auto (the system
client where one is installed, else paramiko), or config (per host, the system client where its ssh config
needs it): ``gputui.transports.ssh.client_choice`` says the rule."""


class LinkError(Exception):
    """A host could not be reached or answered badly. ``str()`` is one readable line naming the cause.

    Its message often quotes what a host, an ssh client or a library said: it is made visible here, once,
    so every view shows ``str(error)`` as it is.
    """

    def __init__(self, *args: object) -> None:
        super().__init__(*(visible(arg) if isinstance(arg, str) else arg for arg in args))


class LinkOptions(Record):
    """Settings a link passes to its agent.

    Attributes:
        memory_interval_s: Seconds between snapshots (memory figures are sampled every time).
        process_interval_s: Seconds between process-list samples (the expensive NVML query).
        read_only: The agent refuses every kill.
        accept_new: Accept and record an unknown SSH host key (OpenSSH's ``accept-new``).
        health_urls: Health endpoints probed by the agent on that host.
        discover_health: Probe health URLs discovered from inference-server launchers.
        health_generate: Also probe token-generating endpoints (sglang ``/health_generate``), at most every
            10 s; off by default so the monitor never loads the server it watches.
        connect_timeout_s: Deadline for connecting and the handshake.
        host_health_urls: Target -> health URLs probed on that host only (from the config file).
        ssh_client: One of ``SSH_CLIENTS``: how remote hosts are reached.
        host_ssh_clients: Target -> the ``SSH_CLIENTS`` entry for that host (from the config file).
        metrics_urls: Servers' metrics endpoints read by the agent on that host (beside the health URL of
            the same origin).
        host_metrics_urls: Target -> metrics URLs read on that host only (from the config file).
    """

    memory_interval_s: float = MEMORY_INTERVAL_S
    process_interval_s: float = PROCESS_INTERVAL_S
    read_only: bool = False
    accept_new: bool = False
    health_urls: tuple[str, ...] = ()
    discover_health: bool = True
    health_generate: bool = False
    connect_timeout_s: float = 10.0
    host_health_urls: dict[str, tuple[str, ...]] = field(default_factory=dict)
    metrics_urls: tuple[str, ...] = ()
    host_metrics_urls: dict[str, tuple[str, ...]] = field(default_factory=dict)
    extra: dict[str, Any] = field(default_factory=dict)
    ssh_client: str = "paramiko"
    host_ssh_clients: dict[str, str] = field(default_factory=dict)

    def for_target(self, target: str) -> LinkOptions:
        """These options with the health and metrics URLs and the SSH client configured for ``target``."""
        health = tuple(dict.fromkeys(self.health_urls + self.host_health_urls.get(target, ())))
        metrics = tuple(dict.fromkeys(self.metrics_urls + self.host_metrics_urls.get(target, ())))
        client = self.host_ssh_clients.get(target, self.ssh_client)
        return replace(self, health_urls=health, metrics_urls=metrics, ssh_client=client)


class HostLink(abc.ABC):
    """A connection to one host's collector."""

    target: str

    @abc.abstractmethod
    def open(self) -> None:
        """Connect and handshake. Raises LinkError with a one-line reason."""

    @abc.abstractmethod
    def next_snapshot(self, timeout_s: float) -> HostSnapshot | None:
        """Block until the next snapshot is due and return it; None when ``timeout_s`` passed first.

        Must return within about ``timeout_s`` however the host behaves, and at once when ``close()`` is
        called from another thread: the app calls it directly from each host's worker.

        Raises LinkError when the link is broken.
        """

    @abc.abstractmethod
    def request(self, command: dict[str, Any], timeout_s: float) -> dict[str, Any]:
        """Send one collector command (``gputui.agent.protocol``) and return its reply's ``result``.

        Raises LinkError when the host cannot be asked or the agent answered with an error.
        """

    @abc.abstractmethod
    def close(self) -> None:
        """Release everything; must return promptly even when the host hangs."""


def configure_command(
    memory_interval_s: float, process_interval_s: float, watch_exits: bool
) -> dict[str, Any]:
    """The ``configure`` command that sets a host's sampling: fast and watching the GPU holders' exits while
    a clean-slate check waits (``watch_exits``), the GPUs' fitness then read at once and with every memory
    sample (so a GPU that turns unfit is seen within one memory interval), and the default fitness period
    again after it."""
    return {
        "cmd": CMD_CONFIGURE,
        "memory_interval_s": memory_interval_s,
        "process_interval_s": process_interval_s,
        "watch_exits": watch_exits,
        FITNESS_INTERVAL_KEY: memory_interval_s if watch_exits else None,
    }


def probe_host(
    link: HostLink, target: str, deadline_s: float, buffer_mib: int, force: bool = False
) -> ProbeReport:
    """The readiness probe of every GPU of the host, through the collector's ``probe`` command, and its
    memory drained (``agent.gpu.probe``); a sample taken after it is the one to judge with it.

    Raises:
        LinkError: the host could not be asked, refused (another probe running, a mode without a collector),
            or answered without a report.
    """
    command = {
        "cmd": PROBE_COMMAND,
        "gpus": None,
        "deadline_s": deadline_s,
        "buffer_mib": buffer_mib,
        "force": force,
    }
    # Its wait for a kill under way or for another gputui's probe of a GPU, then the probe: a deadline each.
    result = link.request(command, 2 * deadline_s + PROBE_REPLY_SLACK_S)
    report = ProbeReport.from_dict(result)
    if report is None or not isinstance(result.get("probes"), list):
        raise LinkError(f"{target}: the collector answered the probe without a report")
    return report


PROBE_REPLY_SLACK_S = 30.0
"""Beyond the probe's deadline, what its answer may take: the samples around it and the memory drain."""


def full_sample(link: HostLink, target: str, timeout_s: float = 30.0) -> HostSnapshot:
    """One immediate full sample (a fresh process list included) through the agent's ``sample`` command.

    Raises:
        LinkError: the host could not be asked, or answered without a well-formed snapshot.
    """
    result = link.request({"cmd": CMD_SAMPLE}, timeout_s)
    data = result.get("snapshot")
    if not isinstance(data, dict):
        raise LinkError(f"{target}: the collector answered without a snapshot")
    try:
        return HostSnapshot.from_dict(data)
    except (KeyError, TypeError, ValueError) as exc:
        raise LinkError(f"{target}: malformed snapshot from the collector ({type(exc).__name__})") from None


ENDPOINT_WAIT_S = 35.0
"""How long a one-shot client (snapshot, check) waits for the first probe of each health endpoint: the
agent's probe deadline (30 s, longer than sglang's own 20 s check) plus slack, so a hanging endpoint shows
TIMEOUT, not "–"."""
ENDPOINT_POLL_S = 0.1


def one_shot_sample(link: HostLink, target: str, timeout_s: float = 30.0) -> HostSnapshot:
    """A full sample for a one-shot client (snapshot, check), with the first probe of every health endpoint.

    The sample comes first: its whole-host sweep is where the collector also finds launchers, so a host
    without health endpoints has its process table read once. Where ``wait_for_endpoints`` finds endpoints,
    the sample is taken again after their first probes, so that health and processes are read together.

    Raises:
        LinkError: as ``full_sample``.
    """
    snapshot = full_sample(link, target, timeout_s)
    if wait_for_endpoints(link):
        snapshot = full_sample(link, target, timeout_s)
    return snapshot


def _first_read_pending(sample: dict[str, Any]) -> bool:
    """Whether an endpoint's first probe (or the first read of its metrics) is still to come."""
    if sample.get("state") is None:
        return not sample.get("detail")  # one that is never probed has its detail at once
    return bool(sample.get("metrics_url")) and sample.get("metrics_at") is None


def wait_for_endpoints(link: HostLink, timeout_s: float = ENDPOINT_WAIT_S) -> bool:
    """Have the agent look for launchers now, then wait until it probed each endpoint once (or ``timeout_s``).

    What the TUI's stream finds over its first seconds, a one-shot client must ask for: the agent discovers
    sglang/vLLM launchers in the process list now (``discover_now``; nothing with ``--no-discover``) and
    probes on threads of its own, so a sample taken right after connecting would show no health or every
    endpoint not probed yet. An endpoint that is never probed (a generating one not enabled, a launcher on
    another host's address, a bad setting) has its detail at once and is not waited for; neither is a link
    that cannot answer ``health`` (a simulated or monitoring-only host).

    Returns:
        Whether the host has health endpoints (configured or discovered).
    """
    deadline = time.monotonic() + timeout_s
    command: dict[str, Any] = {"cmd": CMD_HEALTH, "discover_now": True}
    samples: Any = None
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            return bool(samples)
        try:
            result = link.request(command, left)
        except LinkError:
            return False
        command = {"cmd": CMD_HEALTH}
        samples = result.get("samples")
        if not isinstance(samples, list):
            return False
        if not [s for s in samples if isinstance(s, dict) and _first_read_pending(s)]:
            return bool(samples)
        time.sleep(min(ENDPOINT_POLL_S, max(0.0, deadline - time.monotonic())))


def process_text(link: HostLink, proc: Proc, timeout_s: float = 30.0) -> Proc:
    """``proc`` with its whole command line, read fresh by the collector's ``process`` command.

    Snapshots carry command lines cut to a few KiB (``Proc.cmdline_truncated``); the kill confirmation and a
    process's detail ask for the rest. The collector answers only while the pid still belongs to the process
    that started at ``proc.start_ticks``.

    Raises:
        LinkError: the host could not be asked, or the process is gone or changed (one readable line).
    """
    if proc.start_ticks is None:
        raise LinkError(f"{link.target}: pid {proc.pid}: no start time known, cannot check its identity")
    result = link.request({"cmd": CMD_PROCESS, "pid": proc.pid, "start_ticks": proc.start_ticks}, timeout_s)
    cmdline = result.get("cmdline")
    if result.get("pid") != proc.pid or not isinstance(cmdline, list):
        raise LinkError(f"{link.target}: the collector answered without the command line of pid {proc.pid}")
    return replace(
        proc,
        cmdline=safe_list(cmdline),
        cmdline_truncated=result.get("cmdline_truncated") is True,
    )
