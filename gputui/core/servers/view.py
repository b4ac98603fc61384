"""Client-side views of health samples: state changes as human lines, a per-URL history, short labels.

Pure functions and a small history class over ``model.EndpointSample``; no Textual or Rich here, so the CLI
and notifications use the same words as the endpoint panel. Every machine string (URL, detail) goes through
``text.visible`` before it is put in a line.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Iterable, Sequence

from gputui.agent.protocol import ENDPOINT_STATE_BUSY as BUSY
from gputui.agent.protocol import ENDPOINT_STATE_DOWN as DOWN
from gputui.agent.protocol import ENDPOINT_STATE_ERROR as ERROR
from gputui.agent.protocol import ENDPOINT_STATE_STALLED as STALLED
from gputui.agent.protocol import ENDPOINT_STATE_STARTING as STARTING
from gputui.agent.protocol import ENDPOINT_STATE_TIMEOUT as TIMEOUT
from gputui.agent.protocol import ENDPOINT_STATE_UNHEALTHY as UNHEALTHY
from gputui.agent.protocol import ENDPOINT_STATE_UP as UP
from gputui.core.model import EndpointSample
from gputui.core.text import clock_time, fit

STATE_SEVERITY: dict[str | None, int] = {
    UP: 0,
    STARTING: 1,
    BUSY: 1,
    None: 1,
    ERROR: 2,
    UNHEALTHY: 3,
    TIMEOUT: 4,
    STALLED: 5,
    DOWN: 5,
}
"""Higher is worse; a state this client does not know ranks as ERROR. A server that is starting or busy is
working; a stalled one is as bad as a dead one: requests hang."""

URL_MAX_CHARS = 100
DETAIL_MAX_CHARS = 120
DEFAULT_HISTORY_LEN = 20
"""Probes remembered per URL by :class:`EndpointHistory`."""


def severity(state: str | None) -> int:
    """How bad a state is (see ``STATE_SEVERITY``)."""
    return STATE_SEVERITY.get(state, STATE_SEVERITY[ERROR])


def worst_state(samples: Iterable[EndpointSample]) -> str | None:
    """The worst state among ``samples`` (None when there are none or none was probed yet)."""
    worst: str | None = None
    seen_any = False
    for sample in samples:
        if not seen_any or severity(sample.state) > severity(worst):
            worst = sample.state
        seen_any = True
    return worst


def state_word(sample: EndpointSample) -> str:
    """What the endpoint is now, shortest form: the code for an HTTP answer that is not UP, else the state.

    "503", "404", "DOWN", "TIMEOUT", "ERROR", "UP", or "not probed".
    """
    if sample.state is None:
        return "not probed"
    if sample.state != UP and sample.code is not None and sample.state in (UNHEALTHY, ERROR):
        return str(sample.code)
    return fit(sample.state, 12)


def since_text(sample: EndpointSample, now_s: float | None = None) -> str:
    """How long the current state has lasted: "503 since 16:41:02", "UP since 09:00:00", "not probed yet"."""
    if sample.state is None:
        return "not probed yet"
    if sample.since is None:
        return state_word(sample)
    return f"{state_word(sample)} since {clock_time(sample.since, time.time() if now_s is None else now_s)}"


def _reason(sample: EndpointSample) -> str:
    """The parenthesised reason for a line: the code for HTTP answers, else the detail."""
    if sample.state == UP:
        return ""
    if sample.code is not None and sample.state in (UNHEALTHY, ERROR):
        return f" ({sample.code})"
    if sample.detail:
        return f" ({fit(sample.detail, DETAIL_MAX_CHARS)})"
    return ""


def endpoint_transitions(prev: Sequence[EndpointSample], cur: Sequence[EndpointSample]) -> list[str]:
    """One human line per state change between two sample lists of one host.

    * a state change: ``http://127.0.0.1:30000/health UP → UNHEALTHY (503)``
    * a first result that is not UP: ``http://127.0.0.1:30000/health is DOWN (connection refused)``
      (a first UP is the expected start and says nothing)
    * an endpoint no longer listed: ``http://127.0.0.1:30000/health no longer probed (was DOWN)``

    Args:
        prev: The samples of the previous snapshot (empty for the first one).
        cur: The samples of the current snapshot.

    Returns:
        Lines in the order of ``cur``, then the removed endpoints in the order of ``prev``.
    """
    before = {sample.url: sample for sample in prev}
    now_urls = {sample.url for sample in cur}
    lines: list[str] = []
    for sample in cur:
        old = before.get(sample.url)
        url = fit(sample.url, URL_MAX_CHARS)
        if sample.state is None:
            continue
        if old is None or old.state is None:
            if sample.state != UP:
                lines.append(f"{url} is {fit(sample.state, 12)}{_reason(sample)}")
            continue
        if old.state != sample.state:
            lines.append(f"{url} {fit(old.state, 12)} → {fit(sample.state, 12)}{_reason(sample)}")
    for sample in prev:
        if sample.url not in now_urls and sample.state is not None:
            lines.append(f"{fit(sample.url, URL_MAX_CHARS)} no longer probed (was {fit(sample.state, 12)})")
    return lines


class EndpointHistory:
    """The last N probe results per URL of one host, kept by the client from successive snapshots.

    A probe is told apart from the next by its ``checked_at``: a snapshot that repeats the same probe (the
    agent samples faster than it probes) adds nothing.
    """

    def __init__(self, max_len: int = DEFAULT_HISTORY_LEN) -> None:
        """Args: max_len: Probes (and metrics readings) remembered per URL."""
        self.max_len = max(1, max_len)
        self._states: dict[str, deque[str | None]] = {}
        self._last_checked: dict[str, float | None] = {}
        self._tokens: dict[str, deque[float | None]] = {}
        self._last_read: dict[str, float | None] = {}

    def update(self, samples: Iterable[EndpointSample]) -> None:
        """Record the probes (and the tokens/s of each metrics reading) of one snapshot; URLs no longer listed
        are forgotten."""
        seen: set[str] = set()
        for sample in samples:
            seen.add(sample.url)
            if sample.metrics_at is not None and self._last_read.get(sample.url) != sample.metrics_at:
                self._last_read[sample.url] = sample.metrics_at
                rate = (sample.metrics or {}).get("generation_tokens_per_s")
                tokens = self._tokens.setdefault(sample.url, deque(maxlen=self.max_len))
                tokens.append(float(rate) if isinstance(rate, (int, float)) else None)
            states = self._states.setdefault(sample.url, deque(maxlen=self.max_len))
            if sample.checked_at is None:
                continue
            if self._last_checked.get(sample.url) != sample.checked_at:
                self._last_checked[sample.url] = sample.checked_at
                states.append(sample.state)
        for url in list(self._states):
            if url not in seen:
                del self._states[url]
                self._last_checked.pop(url, None)
                self._tokens.pop(url, None)
                self._last_read.pop(url, None)

    def states(self, url: str) -> tuple[str | None, ...]:
        """The remembered states of ``url``, oldest first."""
        return tuple(self._states.get(url, ()))

    def tokens_per_s(self) -> dict[str, tuple[float | None, ...]]:
        """URL -> its tokens/s readings, oldest first (None: a reading without a rate)."""
        return {url: tuple(values) for url, values in self._tokens.items()}

    def as_dict(self) -> dict[str, tuple[str | None, ...]]:
        """URL → states, oldest first (what the health panel takes)."""
        return {url: tuple(states) for url, states in self._states.items()}
