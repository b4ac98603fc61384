"""What an inference server is doing, from its health answers, its metrics and its launcher's age.

``/health`` alone misleads both ways: a server whose engine died can keep answering 200 while requests hang
(vLLM's EngineCore), and a server deep in a long prefill can answer 503 while it generates (sglang's check
counts only recent detokenizer output). :class:`ServerStateTracker` (one per endpoint) combines:

- the health probe's state and HTTP code (the collector's five states);
- the server's metrics (:class:`ServerMetrics`), when they could be read: requests running and waiting, and
  the generated-token counter;
- the age of the launcher process that serves the endpoint, when it is known and alive (a launcher that is
  gone has no age: nothing of it is remembered);
- the dead members of its job (``jobs.JobFacts``): a 503 with a defunct member is UNHEALTHY, never
  STARTING, and a job with a defunct leader holding GPU memory or a settled zombie is never BUSY; an
  UNHEALTHY or STALLED server whose job runs under a profiler says so (its overhead may be why);
- its job's GPUs (``spinning``): busy at idle power for the spin window while no token came, with requests
  pending, the server is STALLED on a collective that is likely hung, whatever the stall window; a stall
  whose GPUs cannot tell (MIG, power not given) says so;

into one of the states below, with the time of the last change, a one-line reason and a short history of
tokens/s. Metrics that could not be read (slow, huge, malformed, gone) blank only the metrics: the state then
comes from health alone.
"""

from __future__ import annotations

from collections import deque

from gputui.agent.protocol import (
    ENDPOINT_STATE_BUSY,
    ENDPOINT_STATE_DOWN,
    ENDPOINT_STATE_ERROR,
    ENDPOINT_STATE_STALLED,
    ENDPOINT_STATE_STARTING,
    ENDPOINT_STATE_TIMEOUT,
    ENDPOINT_STATE_UNHEALTHY,
    ENDPOINT_STATE_UP,
)
from gputui.core.model import EndpointSample, Record, replace
from gputui.core.servers.jobs import JobFacts
from gputui.core.servers.metrics import ServerMetrics, generation_delta, with_rate
from gputui.core.servers.spinning import WHY_TOKENS, spinning_text
from gputui.core.text import SafeText, age_text, fit

SERVER_STATES = (
    ENDPOINT_STATE_STARTING,
    ENDPOINT_STATE_UP,
    ENDPOINT_STATE_BUSY,
    ENDPOINT_STATE_STALLED,
    ENDPOINT_STATE_UNHEALTHY,
    ENDPOINT_STATE_DOWN,
    ENDPOINT_STATE_TIMEOUT,
    ENDPOINT_STATE_ERROR,
)

DEFAULT_STALL_AFTER_S = 30.0
"""Seconds of a flat generated-token counter, with requests pending, before a server is STALLED."""
DEFAULT_STARTING_GRACE_S = 900.0
"""A launcher younger than this may still be loading: large models take minutes to load, compile and warm
up, and a launcher that crashed while loading is gone (it has no age) and reads as DOWN at once."""
DEFAULT_HISTORY_LEN = 30
"""Readings of tokens/s kept for the sparkline."""
LAUNCHER_SAME_SLACK_S = 2.0
"""Launcher ages that put its start within this many seconds of the one seen before are the same launcher."""
REASON_MAX_CHARS = 160

_CODE_MAY_BE_LOADING = 503
_FAILING_BUT_MAY_BE_BUSY = (ENDPOINT_STATE_UNHEALTHY, ENDPOINT_STATE_TIMEOUT)


class ServerState(Record):
    """One endpoint's derived state after an update.

    Attributes:
        state: One of ``SERVER_STATES`` (or a state a newer collector sent), None before the first probe.
        since: Epoch seconds (the caller's ``now``) of the last change of ``state``.
        previous_state: The state before that change (None at the first one).
        reason: One human line: why this state, with the figures behind it.
        metrics: The latest metrics reading with its derived tokens/s, None while metrics are blank.
        tokens_per_s_history: Oldest first; None where a reading had no rate (first reading, metrics blank).
        stalled_for_s: How long requests have been pending with the counter flat (None: not pending, or
            unknown).
        from_job: The job's dead members (not the probe alone) decided the state or its reason.
    """

    state: str | None
    since: float | None
    previous_state: str | None
    reason: SafeText
    metrics: ServerMetrics | None = None
    tokens_per_s_history: tuple[float | None, ...] = ()
    stalled_for_s: float | None = None
    from_job: bool = False


def _figure(value: float | None, digits: int = 0) -> str:
    return "–" if value is None else f"{value:.{digits}f}"


def _health_word(health: EndpointSample) -> str:
    if health.code is not None and health.state != ENDPOINT_STATE_UP:
        return f"HTTP {health.code}"
    if health.detail:
        return fit(health.detail, 80)
    return fit(health.state or "not probed", 12)


class ServerStateTracker:
    """The state machine of one server endpoint. Pure: fed samples and a clock, it reads nothing itself.

    Args:
        stall_after_s: Seconds of no generated token, with requests pending, before STALLED.
        starting_grace_s: A launcher younger than this that has not served yet may be loading (STARTING).
        history_len: Tokens/s readings kept.

    Raises:
        ValueError: A setting that is not a positive finite number (``starting_grace_s`` may be 0: never
            STARTING).
    """

    def __init__(
        self,
        stall_after_s: float = DEFAULT_STALL_AFTER_S,
        starting_grace_s: float = DEFAULT_STARTING_GRACE_S,
        history_len: int = DEFAULT_HISTORY_LEN,
    ) -> None:
        if not 0 < stall_after_s < float("inf"):
            raise ValueError(f"stall window must be a positive number of seconds, not {stall_after_s!r}")
        if not 0 <= starting_grace_s < float("inf"):
            raise ValueError(f"starting grace must be a number of seconds, not {starting_grace_s!r}")
        if history_len < 1:
            raise ValueError(f"history length must be at least 1, not {history_len!r}")
        self.stall_after_s = float(stall_after_s)
        self.starting_grace_s = float(starting_grace_s)
        self._history: deque[float | None] = deque(maxlen=history_len)
        self._metrics: ServerMetrics | None = None
        self._last_reading: ServerMetrics | None = None
        self._counter_reading: ServerMetrics | None = None
        self._quiet_since: float | None = None
        self._last_progress_at: float | None = None
        self._pending_since: float | None = None
        self._last_health_at: float | None = None
        self._launcher_started_at: float | None = None
        self._served = False
        self._current = ServerState(None, None, None, SafeText("not probed yet"))

    @property
    def current(self) -> ServerState:
        """The state after the last update."""
        return self._current

    def update(
        self,
        health: EndpointSample | None,
        metrics: ServerMetrics | None,
        launcher_age_s: float | None,
        now: float,
        metrics_error: str | None = None,
        job: JobFacts | None = None,
    ) -> ServerState:
        """Take the latest samples and return the state they make.

        The same samples may be fed again (every snapshot carries the latest): a metrics reading is taken
        once, by its ``sampled_at``.

        Args:
            health: The endpoint's latest health sample (None or state None: not probed yet).
            metrics: Its latest metrics reading (rate not needed: it is derived here), None when blank.
            launcher_age_s: Seconds since the launcher process serving this endpoint started, None when no
                launcher is known.
            now: Epoch seconds, the clock ``since`` is kept in.
            metrics_error: Why metrics are blank, for the reason line (e.g. "timed out", "malformed").
            job: The dead members of the server's job in the same snapshot (None: none known).

        Returns:
            The new :class:`ServerState` (also ``current``).
        """
        self._note_launcher(launcher_age_s, now)
        if metrics is not None:
            self._take_metrics(metrics)
        else:
            self._metrics = None
            self._pending_since = None  # pending is known only while it is watched
            checked_at = None if health is None else health.checked_at
            if checked_at is not None and checked_at != self._last_health_at:
                self._history.append(None)
        if health is not None:
            self._last_health_at = health.checked_at
        self._note_served(health, metrics)
        facts = job or JobFacts()
        state, reason = self._decide(health, launcher_age_s, metrics_error, facts)
        if facts.profiled and state in (ENDPOINT_STATE_UNHEALTHY, ENDPOINT_STATE_STALLED):
            reason = f"{reason}; {facts.profiled}"
        if state == ENDPOINT_STATE_UP:
            self._served = True
        previous = self._current
        changed = state != previous.state
        self._current = ServerState(
            state=state,
            since=now if changed else previous.since,
            previous_state=previous.state if changed else previous.previous_state,
            reason=fit(reason, REASON_MAX_CHARS),
            metrics=self._metrics,
            tokens_per_s_history=tuple(self._history),
            stalled_for_s=self._stalled_for(),
            from_job=bool(facts.defunct)
            and (facts.defunct_text() in reason or bool(facts.not_busy) and facts.not_busy in reason),
        )
        return self._current

    def _take_metrics(self, metrics: ServerMetrics) -> None:
        if self._last_reading is not None and metrics.sampled_at <= self._last_reading.sampled_at:
            self._metrics = self._last_reading  # a reading already taken: snapshots repeat the latest
            return
        reading = with_rate(self._counter_reading, metrics)
        delta = generation_delta(self._counter_reading, metrics)
        # The engine's progress figure changes only while it decodes (sglang's throughput gauge is set when
        # its scheduler logs, TGI counts forward passes, llama.cpp decode calls): progress even when the
        # token counter waits for requests to end.
        engine_moved = (
            self._counter_reading is not None
            and reading.progress is not None
            and self._counter_reading.progress is not None
            and reading.progress != self._counter_reading.progress
        )
        if engine_moved and delta is not None and not delta.tokens and not delta.reset:
            # A flat counter under a moving engine is not 0 tokens/s: the engine's own figure, else unknown.
            reading = replace(reading, generation_tokens_per_s=reading.engine_tokens_per_s)
        if reading.generation_tokens_series:
            if delta is None or delta.tokens > 0 or delta.reset or engine_moved:
                self._quiet_since = reading.sampled_at
                if delta is not None and (delta.tokens > 0 or engine_moved):
                    self._last_progress_at = reading.sampled_at
                    self._served = True
            self._counter_reading = reading
        pending = reading.pending
        if not pending:
            self._pending_since = None
        elif self._pending_since is None:
            self._pending_since = reading.sampled_at
        self._metrics = self._last_reading = reading
        self._history.append(reading.generation_tokens_per_s)

    def _note_launcher(self, launcher_age_s: float | None, now: float) -> None:
        if launcher_age_s is None:
            return
        started = now - launcher_age_s
        known = self._launcher_started_at
        if known is None or abs(started - known) > LAUNCHER_SAME_SLACK_S:
            self._launcher_started_at = started
            self._served = False

    def _note_served(self, health: EndpointSample | None, metrics: ServerMetrics | None) -> None:
        """Whether this launcher has served, from what one sample can show: generated tokens in its metrics,
        or (without metrics) a /health that answered 200 since it started."""
        if metrics is not None and metrics.generation_tokens_total:
            self._served = True
        last_ok = None if health is None else health.last_ok
        started = self._launcher_started_at
        if last_ok is not None and started is not None and last_ok >= started - LAUNCHER_SAME_SLACK_S:
            self._served = True

    def _stalled_for(self) -> float | None:
        reading = self._metrics
        if reading is None or not reading.generation_tokens_series or not reading.pending:
            return None
        if self._quiet_since is None or self._pending_since is None:
            return None
        return max(0.0, reading.sampled_at - max(self._quiet_since, self._pending_since))

    def _progressing(self) -> bool:
        reading = self._metrics
        if reading is None or self._last_progress_at is None:
            return False
        return reading.sampled_at - self._last_progress_at < self.stall_after_s

    def _decide(
        self,
        health: EndpointSample | None,
        launcher_age_s: float | None,
        metrics_error: str | None,
        job: JobFacts,
    ) -> tuple[str | None, str]:
        if health is None or health.state is None:
            return None, "not probed yet"
        state = health.state
        word = _health_word(health)
        reading = self._metrics
        blank = f"; metrics: {metrics_error}" if reading is None and metrics_error else ""
        loading = state == ENDPOINT_STATE_DOWN or (
            state == ENDPOINT_STATE_UNHEALTHY and health.code == _CODE_MAY_BE_LOADING
        )
        young = launcher_age_s is not None and launcher_age_s < self.starting_grace_s
        if loading and young and not self._served and launcher_age_s is not None and not job.defunct:
            # Before it first serves, a flat counter with work queued is a warm-up (compiling, capturing
            # graphs), not a stall.
            return ENDPOINT_STATE_STARTING, f"starting: {word}, launcher {age_text(launcher_age_s)} old"
        stalled_for = self._stalled_for()
        pending = f"{_figure(reading.running)} running, {_figure(reading.waiting)} waiting" if reading else ""
        spin = job.spin
        if reading is not None and state != ENDPOINT_STATE_DOWN and spin is not None:
            if spin.spun_long_enough(stalled_for):
                # Its GPUs spun at idle power while no token came, both for the whole spin window.
                sentence = spinning_text(spin.gpus, spin.after_s, WHY_TOKENS)
                return ENDPOINT_STATE_STALLED, f"{sentence} ({pending}, health {word})"
        if (
            reading is not None
            and state != ENDPOINT_STATE_DOWN
            and stalled_for is not None
            and stalled_for >= self.stall_after_s
        ):
            unknown = f"; a spinning collective: unknown, {spin.unknown}" if spin and spin.unknown else ""
            return ENDPOINT_STATE_STALLED, (
                f"stalled: {pending}, no token generated for {age_text(stalled_for)} (health {word}){unknown}"
            )
        if state == ENDPOINT_STATE_UP:
            if reading is None:
                return state, f"health UP{blank}"
            return state, (
                f"serving: {_figure(reading.running)} running, {_figure(reading.waiting)} waiting, "
                f"{_figure(reading.generation_tokens_per_s)} tokens/s"
            )
        if job.not_busy and reading is not None and state in _FAILING_BUT_MAY_BE_BUSY and self._progressing():
            return state, f"{word}: tokens still counted but {job.not_busy}"
        if reading is not None and state in _FAILING_BUT_MAY_BE_BUSY and self._progressing():
            rate = reading.generation_tokens_per_s
            if rate:
                doing = f"generating {rate:.0f} tokens/s"
            else:  # between two scrapes that moved: a token within the stall window, none since
                quiet = reading.sampled_at - (self._last_progress_at or reading.sampled_at)
                doing = f"a token generated {age_text(quiet)} ago"
            return ENDPOINT_STATE_BUSY, f"busy: health {word} but {doing}; not dead, do not kill"
        if state == ENDPOINT_STATE_UNHEALTHY and job.defunct:
            return state, f"{word} with {job.defunct_text()}{blank}"
        return state, f"{word}{blank}"
