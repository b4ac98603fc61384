"""One running collector seen through its pipes: JSON lines in, JSON-line commands out.

Nothing here knows how the bytes travel. A ``Pipe`` is the collector's stdin, stdout and stderr: an SSH
exec channel (``connect.ChannelPipe``) or the pipes of a local ``ssh`` child process. A ``CollectorStream``
runs one reader thread over it that splits stdout into lines, takes the hello, keeps the newest snapshot
not yet read (``freshness.LatestInbox``, as the TUI does per host) and the replies to pending commands, and
turns an end, a break or a silence of the stream into one LinkError that every waiter gets (the silence
limit is ``freshness.stale_after_s``, given by the link). Every wait has a deadline, and a runaway collector
cannot make the reader hold more than ``LINE_CAP_BYTES`` of one line.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable

from gputui.agent.protocol import CMD_CONFIGURE, PROTOCOL_VERSION
from gputui.core.link import LinkError, LinkOptions
from gputui.core.model import HostSnapshot, ProcMemo
from gputui.transports.freshness import LatestInbox
from gputui.transports.ssh.bundle import PYTHON_MIN, TOO_OLD_MARK, TOO_OLD_STATUS
from gputui.transports.ssh.errors import (
    PythonMissing,
    PythonTooOld,
    SetupFailed,
    phase_error,
    python_too_old,
    shown,
)

LINE_CAP_BYTES = 16 * 1024 * 1024
"""Longest line accepted; a longer one breaks the link (a runaway remote must not eat our memory)."""
PREAMBLE_CAP_BYTES = 64 * 1024
"""Output that is not the collector's tolerated before the hello (login scripts that print banners)."""
STDERR_TAIL_BYTES = 8 * 1024
"""How much of the collector's stderr is kept to explain its end."""
RECV_CHUNK_BYTES = 256 * 1024
EXIT_STATUS_WAIT_S = 1.0
"""How long the end of the output waits for the exit status that closely follows it."""
QUIT_BUDGET_S = 0.3
"""How long closing tries to tell the collector to quit (it exits on the closed stdin anyway)."""
PYTHON_MISSING_STATUS = 127
PYTHON_MISSING_MESSAGE = "python3 not found on host"
PREAMBLE = "preamble"
"""What ``decode`` returns for a line before the hello that is not the collector's."""

TYPE_CHECKING = False
if not TYPE_CHECKING:  # typing is a type checker's: at run time the last definition is the method

    def overload(function: object) -> object:
        return function

else:
    from typing import Any, TypeVar, overload

    from gputui.transports.ssh.interfaces import Pipe

    Decoded = HostSnapshot | dict[str, Any] | str | None
    _T = TypeVar("_T")


class CollectorStream:
    """The stream of one running collector: its hello, snapshots and replies, and the commands sent.

    Args:
        target: The name the user gave the host: it starts every error line, and snapshots carry it (the
            collector's command line never holds it).
        pipe: The running collector's pipes.
        stale_after_s: Seconds without any data after which the stream counts as broken.
        first_grace_s: The same before the first snapshot, which may take longer than a steady one (a full
            process walk, NVML start-up); never less than ``stale_after_s``.
    """

    quit_line: bytes | None = b'{"cmd":"quit"}\n'
    """What asks the collector to quit when the link closes; None: it takes no commands."""
    failed_start: str | None = None
    """What an end of the output before the hello says, when not the collector's exit status."""

    def __init__(self, target: str, pipe: Pipe, *, stale_after_s: float, first_grace_s: float) -> None:
        self.target = target
        self._pipe = pipe
        self._stale_after_s = stale_after_s
        self._first_grace_s = max(stale_after_s, first_grace_s)
        self._cond = threading.Condition()
        self._hello: dict[str, Any] | None = None
        self._snapshots: LatestInbox[str, HostSnapshot] = LatestInbox()
        """The newest snapshot not yet returned (a reader that falls behind skips the older ones)."""
        self._latest: HostSnapshot | None = None
        self._had_snapshot = False
        self._replies: dict[int, dict[str, Any]] = {}
        self._pending: set[int] = set()
        self._next_id = 1
        self._error: LinkError | None = None
        self._last_data_mono = time.monotonic()
        self._reader: threading.Thread | None = None
        self._write_lock = threading.Lock()
        self._stderr_tail = bytearray()
        self._elided_base: HostSnapshot | None = None
        self._memo = ProcMemo()
        """The last snapshot read: what the next one, sent with unchanged parts left out, completes."""

    @property
    def hello(self) -> dict[str, Any] | None:
        """The collector's hello, once it came."""
        with self._cond:
            return self._hello

    @property
    def failed(self) -> bool:
        """Whether the stream broke or was closed."""
        with self._cond:
            return self._error is not None

    def fail(self, error: LinkError) -> None:
        """Break the stream with ``error`` (the first error stays) and wake every waiter."""
        with self._cond:
            if self._error is None:
                self._error = error
            self._cond.notify_all()

    def _error_again(self) -> LinkError:
        """A fresh exception like the stored one (the same instance raised twice would pile up tracebacks)."""
        error = self._error or LinkError(f"{self.target}: link not open")
        again = type(error)(str(error))
        again.__dict__.update(error.__dict__)  # what it carries besides its line (PythonTooOld's version)
        return again

    @overload
    def _wait_for(self, ready: Callable[[], _T | None], deadline: float, late: str) -> _T: ...

    @overload
    def _wait_for(
        self, ready: Callable[[], _T | None], deadline: float, *, wake_at: Callable[[], float] | None = None
    ) -> _T | None: ...

    def _wait_for(
        self,
        ready: Callable[[], _T | None],
        deadline: float,
        late: str | None = None,
        wake_at: Callable[[], float] | None = None,
    ) -> _T | None:
        """Wait until ``ready()`` (called under the lock) returns something, and return that.

        Raises the stream's error as soon as there is one. At ``deadline`` (monotonic) raises
        ``LinkError(late)``, or returns None when ``late`` is None. ``wake_at`` gives an earlier moment at
        which ``ready`` must be asked again even if nothing happened (when data turns stale).
        """
        with self._cond:
            while True:
                value = ready()
                if value is not None:
                    return value
                if self._error is not None:
                    raise self._error_again()
                now = time.monotonic()
                if now >= deadline:
                    if late is None:
                        return None
                    raise LinkError(f"{self.target}: {late}")
                wake = deadline if wake_at is None else min(deadline, wake_at())
                self._cond.wait(max(0.0, wake - now))

    # -- starting and stopping ---------------------------------------------------------------------------

    def start(self, payload: bytes, timeout_s: float) -> dict[str, Any]:
        """Start reading, write ``payload`` (what the remote loader reads first), and return the hello.

        Raises:
            LinkError: No hello within ``timeout_s``, or the stream ended first (``PythonMissing``: there is
                no python3 there); ``SetupFailed`` when the collector speaks another protocol.
        """
        reader = threading.Thread(target=self._read_loop, name=f"gputui-ssh-{self.target}", daemon=True)
        with self._cond:
            self._reader = reader
            self._last_data_mono = time.monotonic()
        reader.start()
        if payload:
            try:
                self.send(payload, time.monotonic() + timeout_s, "collector bundle")
            except LinkError:
                # The remote may have exited at once (no python3): its status says more than the write.
                self._wait_for(lambda: None, time.monotonic() + min(EXIT_STATUS_WAIT_S, timeout_s))
                raise
        late = f"no hello from the collector within {timeout_s:.1f} s"
        hello = self._wait_for(lambda: self._hello, time.monotonic() + timeout_s, late)
        protocol = hello.get("protocol")
        if protocol != PROTOCOL_VERSION:
            raise SetupFailed(
                f"{self.target}: the collector speaks protocol {protocol!r}, this gputui speaks "
                f"{PROTOCOL_VERSION}"
            )
        return hello

    def configure(self, options: LinkOptions, timeout_s: float) -> None:
        """Send the health settings of ``options``, if any; SetupFailed when the collector refuses them.

        URLs are user strings: they travel as JSON data, never on the command line.
        """
        if not (options.health_urls or options.health_generate or options.metrics_urls):
            return
        command = {
            "cmd": CMD_CONFIGURE,
            "health_urls": list(options.health_urls),
            "metrics_urls": list(options.metrics_urls),
            "discover_health": options.discover_health,
            "health_generate": options.health_generate,
        }
        try:
            self.request(command, timeout_s)
        except LinkError as exc:
            if self.failed:
                raise
            # The collector refused the URLs: the same URLs will be refused again.
            raise SetupFailed(f"{exc} (health URLs)") from None

    def close(self) -> None:
        """Mark the stream closed (waiters get "link closed"); ask the collector to quit if it said hello."""
        self.fail(LinkError(f"{self.target}: link closed"))
        if self.hello is not None and self.quit_line is not None:
            try:
                self.send(self.quit_line, time.monotonic() + QUIT_BUDGET_S, "quit command")
            except LinkError:
                pass

    def end(self, join_s: float) -> None:
        """Close the pipe and wait up to ``join_s`` for the reader thread to finish."""
        self.fail(LinkError(f"{self.target}: link closed"))
        self._pipe.close()
        self.join(join_s)

    def join(self, timeout_s: float) -> None:
        """Wait up to ``timeout_s`` for the reader thread (it stops within a second of a failure)."""
        reader = self._reader
        if reader is not None and reader is not threading.current_thread():
            reader.join(timeout_s)

    # -- the HostLink calls ------------------------------------------------------------------------------

    def next_snapshot(self, timeout_s: float) -> HostSnapshot | None:
        """The newest snapshot not yet returned (older unread ones are dropped); None on timeout.

        Raises:
            LinkError: The stream broke, or no data came for ``stale_after_s`` ("no data for 3.2 s").
        """

        def silence_limit_s() -> float:
            return self._stale_after_s if self._had_snapshot else self._first_grace_s

        def newest() -> HostSnapshot | None:
            snapshot = self._snapshots.take().get(self.target)
            if snapshot is not None:
                self._had_snapshot = True
                return snapshot
            silent_s = time.monotonic() - self._last_data_mono
            if self._error is None and silent_s > silence_limit_s():
                self._error = LinkError(f"{self.target}: no data for {silent_s:.1f} s")
            return None

        return self._wait_for(
            newest,
            time.monotonic() + max(0.0, timeout_s),
            wake_at=lambda: self._last_data_mono + silence_limit_s() + 0.05,
        )

    def request(self, command: dict[str, Any], timeout_s: float) -> dict[str, Any]:
        """Send one command and wait for its reply's result. Raises LinkError on error, failure or timeout."""
        name = str(command.get("cmd"))
        with self._cond:
            if self._error is not None:
                raise self._error_again()
            request_id = self._next_id
            self._next_id += 1
            self._pending.add(request_id)
        deadline = time.monotonic() + max(0.0, timeout_s)
        try:
            line = json.dumps(dict(command, id=request_id), ensure_ascii=False, separators=(",", ":")) + "\n"
            self.send(line.encode("utf-8"), deadline, f"{name} command")
            late = f"no reply to {name} within {timeout_s:.1f} s"
            reply = self._wait_for(lambda: self._replies.pop(request_id, None), deadline, late)
        finally:
            with self._cond:
                self._pending.discard(request_id)
                self._replies.pop(request_id, None)
        if not reply.get("ok"):
            raise LinkError(f"{self.target}: {name} failed: {shown(str(reply.get('error') or 'no reason'))}")
        result = reply.get("result")
        if not isinstance(result, dict):
            return {}
        snapshot = result.get("snapshot")
        if isinstance(snapshot, dict):
            # The remote collector does not know the name the user gave (it is kept off its command line).
            result["snapshot"] = dict(snapshot, target=self.target)
        return result

    def send(self, data: bytes, deadline: float, what: str) -> None:
        """Write all of ``data`` before ``deadline`` (monotonic); raises LinkError naming ``what``."""
        view = memoryview(data)
        with self._write_lock:
            while view:
                if time.monotonic() > deadline:
                    raise LinkError(f"{self.target}: cannot send the {what}: the host does not read")
                try:
                    sent = self._pipe.send(view[:RECV_CHUNK_BYTES])
                except (OSError, EOFError) as exc:
                    raise phase_error(self.target, f"cannot send the {what}", exc) from None
                if sent is None:
                    continue
                if sent <= 0:
                    raise LinkError(f"{self.target}: cannot send the {what}: channel closed")
                view = view[sent:]

    # -- the reader thread -------------------------------------------------------------------------------

    def decode(self, line: bytes) -> Decoded:
        """One line of output: a hello or reply message, a snapshot, ``PREAMBLE`` (output before the hello
        that is not the collector's), or None (nothing to take). Runs on the reader thread only.

        Raises:
            LinkError: The line breaks the stream.
        """
        line = line.strip()
        if not line:
            return None
        have_hello = self._hello is not None  # only this thread sets it
        try:
            message = json.loads(line.decode("utf-8", "replace"))
        except (ValueError, RecursionError):  # RecursionError: arrays nested deeper than the parser goes
            message = None
        if not isinstance(message, dict):
            if not have_hello:
                return PREAMBLE
            excerpt = shown(repr(line[:80]))
            raise LinkError(f"{self.target}: the collector sent a line that is not a JSON object: {excerpt}")
        kind = message.get("t")
        if kind == "hello":
            return message
        if not have_hello:
            return PREAMBLE
        if kind == "snapshot":
            data = message.get("snapshot")
            try:
                if not isinstance(data, dict):
                    raise TypeError("not an object")
                data["target"] = self.target
                snapshot = HostSnapshot.from_dict(data, self._elided_base, self._memo)
            except (TypeError, ValueError, KeyError, AttributeError, OverflowError, RecursionError) as exc:
                raise LinkError(
                    f"{self.target}: the collector sent a malformed snapshot: {shown(str(exc))}"
                ) from None
            self._elided_base = snapshot
            return snapshot
        if kind == "reply":
            return message
        return None

    def _take(self, message: HostSnapshot | dict[str, Any]) -> None:
        with self._cond:
            if isinstance(message, HostSnapshot):
                self._snapshots.put(self.target, message)
                self._latest = message
            elif message.get("t") == "hello":
                self._hello = message
            elif message.get("t") == "reply":
                reply_id = message.get("id")
                if isinstance(reply_id, int) and reply_id in self._pending:
                    self._replies[reply_id] = message
            self._cond.notify_all()

    def _read_loop(self) -> None:
        buffer = bytearray()
        scanned = 0
        preamble_bytes = 0
        while not self.failed:
            try:
                data = self._pipe.recv(RECV_CHUNK_BYTES)
            except (OSError, EOFError) as exc:
                detail = shown(str(exc) or type(exc).__name__)
                self.fail(LinkError(f"{self.target}: connection lost: {detail}"))
                return
            self._keep_stderr()
            if data is None:
                continue
            if not data:
                self.fail(self._end_error())
                return
            with self._cond:
                self._last_data_mono = time.monotonic()
            buffer += data
            while True:
                end = buffer.find(b"\n", scanned)
                if end < 0:
                    scanned = len(buffer)
                    break
                line = bytes(buffer[:end])
                del buffer[: end + 1]
                scanned = 0
                try:
                    message = self.decode(line)
                except LinkError as exc:
                    self.fail(exc)
                    return
                if isinstance(message, str):  # PREAMBLE
                    preamble_bytes += len(line) + 1
                    if preamble_bytes > PREAMBLE_CAP_BYTES:
                        noise = f"no hello, only {preamble_bytes} bytes of other output"
                        self.fail(LinkError(f"{self.target}: {noise}"))
                        return
                elif message is not None:
                    self._take(message)
            if len(buffer) > LINE_CAP_BYTES:
                cap_mib = LINE_CAP_BYTES // (1024 * 1024)
                self.fail(LinkError(f"{self.target}: the collector sent a line over {cap_mib} MiB"))
                return

    def _keep_stderr(self) -> None:
        chunk = self._pipe.stderr(STDERR_TAIL_BYTES)
        if chunk:
            self._stderr_tail += chunk
            del self._stderr_tail[:-STDERR_TAIL_BYTES]

    def _end_error(self) -> LinkError:
        """The error for the end of the collector's output; permanent when it will only happen again.

        A collector that ended before it could even say hello (no python3, too old a python) will do so
        again: a lasting problem. A stream that ends later is worth reopening.
        """
        status = self._pipe.exit_status(EXIT_STATUS_WAIT_S)
        self._keep_stderr()
        exited = status is not None and status >= 0
        stderr = self._stderr_tail.decode("utf-8", "replace")
        lines = [line for line in stderr.strip().splitlines() if line.strip()]
        before_hello = self._hello is None
        if before_hello and self.failed_start is not None:
            why = shown(lines[-1]) if lines else f"exit status {status}"
            message = f"{self.target}: {self.failed_start}: {why}"
            return SetupFailed(message) if exited else LinkError(message)
        too_old = [line.split()[1:2] for line in lines if line.startswith(TOO_OLD_MARK + " ")]
        if before_hello and status == TOO_OLD_STATUS and too_old and too_old[-1]:
            needed = ".".join(map(str, PYTHON_MIN))
            version = shown(too_old[-1][0], 20)
            return PythonTooOld(f"{self.target}: {python_too_old(version, needed)}", version, needed)
        if before_hello and (
            status == PYTHON_MISSING_STATUS
            or "python3: not found" in stderr
            or "python3: command not found" in stderr
        ):
            return PythonMissing(f"{self.target}: {PYTHON_MISSING_MESSAGE}")
        last = f": {shown(lines[-1])}" if lines else ""
        if not exited:
            return LinkError(f"{self.target}: the collector's channel closed{last}")
        message = f"{self.target}: the collector exited with status {status}{last}"
        return SetupFailed(message) if before_hello else LinkError(message)
