"""The local host: the collector (``gputui.agent``) runs in this process, no subprocess, no socket."""

from __future__ import annotations

import threading
import time

from gputui.agent.collector import Agent
from gputui.agent.protocol import PROCESSES_SAME
from gputui.core.link import HostLink, LinkError, LinkOptions
from gputui.core.model import HostSnapshot, ProcMemo

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

LOCAL_TARGET = "local"


class LocalLink(HostLink):
    """A link to an in-process Agent.

    A kill that goes on after its signals (an escalation, a wait) runs in a keeper process of its own
    (``gputui.agent.kill.keeper``), so that it finishes, and writes the audit lines of what it sent, even when
    this process is killed or its terminal closes: ``keeps_kills``, and the client passes the audit log's
    spec with the command.

    ``next_snapshot`` sleeps until the next sample is due (``memory_interval_s`` after the last one) and then
    samples; the agent reuses its last process list until ``process_interval_s`` has passed. While the agent
    watches exits (``Agent.pause``), a GPU holder's exit makes the sample, with a fresh process list, at once.
    """

    def __init__(self, options: LinkOptions | None = None, **agent_kwargs: Any) -> None:
        """Args:
        options: Intervals, read-only mode and health settings.
        agent_kwargs: Extra Agent arguments (``use_psutil``, ``use_pynvml``, ``nvml_deadline_s``).
        """
        self.target = LOCAL_TARGET
        self.keeps_kills = True
        self._options = options or LinkOptions()
        self._agent_kwargs = agent_kwargs
        self._agent: Agent | None = None
        self._closed = threading.Event()
        self._wake = threading.Event()
        self.hello: dict[str, Any] | None = None
        self._previous: HostSnapshot | None = None
        self._memo = ProcMemo()

    @property
    def agent(self) -> Agent:
        if self._agent is None:
            raise LinkError(f"{self.target}: link not open")
        return self._agent

    def open(self) -> None:
        if self._closed.is_set():
            raise LinkError(f"{self.target}: link closed")
        if self._agent is not None:
            return
        try:
            self._agent = Agent(
                target=self.target,
                read_only=self._options.read_only,
                memory_interval_s=self._options.memory_interval_s,
                process_interval_s=self._options.process_interval_s,
                health_urls=self._options.health_urls,
                discover_health=self._options.discover_health,
                health_generate=self._options.health_generate,
                metrics_urls=self._options.metrics_urls,
                **dict({"kill_keeper": True}, **self._agent_kwargs),
            )
        except Exception as exc:  # the collector failing to start is a host error, one line
            raise LinkError(f"{self.target}: cannot start the collector: {exc}") from exc
        self.hello = self._agent.hello()

    def next_snapshot(self, timeout_s: float) -> HostSnapshot | None:
        if self._closed.is_set():
            raise LinkError(f"{self.target}: link closed")
        agent = self.agent
        deadline = time.monotonic() + max(0.0, timeout_s)
        while True:
            if self._closed.is_set():
                raise LinkError(f"{self.target}: link closed")
            last = agent.last_sample_mono
            now = time.monotonic()
            due = now if last is None else last + agent.memory_interval_s
            if now >= due:
                return self._decode(agent.sample())
            if now >= deadline:
                return None
            # configure() sets _wake so a shorter interval takes effect at once.
            exited = agent.pause(min(due, deadline) - now, self._wake)
            self._wake.clear()
            if exited and not self._closed.is_set():
                return self._decode(agent.sample(force_processes=True))

    def _decode(self, data: dict[str, Any]) -> HostSnapshot:
        """The model of one sample; process lists taken at the same time as the last one's are not decoded
        again (the stream's ``processes_same``): the agent re-reads them every few memory samples only."""
        previous = self._previous
        listed_at = data.get("processes_time")
        if previous is not None and listed_at is not None and previous.processes_time == listed_at:
            data[PROCESSES_SAME] = True
        snapshot = HostSnapshot.from_dict(data, previous, self._memo)
        self._previous = snapshot
        return snapshot

    def request(self, command: dict[str, Any], timeout_s: float) -> dict[str, Any]:
        """Run one agent command in this thread (a kill with escalation takes up to its escalation time)."""
        if self._closed.is_set():
            raise LinkError(f"{self.target}: link closed")
        reply = self.agent.handle(command)
        if command.get("cmd") == "configure":
            self._wake.set()
        if not reply.get("ok"):
            raise LinkError(f"{self.target}: {reply.get('error') or 'command failed'}")
        result = reply.get("result")
        return result if isinstance(result, dict) else {}

    def close(self) -> None:
        self._closed.set()
        self._wake.set()
        agent, self._agent = self._agent, None
        if agent is not None:
            agent.close()
