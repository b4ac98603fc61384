"""The system OpenSSH client as the SSH transport: every host the user's ``ssh`` reaches, gputui reaches.

``OpenSshSession`` is the ``ssh.interfaces.Session`` of ``SshLink(client="openssh")``: each command the link
runs (the collector, or the reduced collector) is one child process::

    ssh [-F FILE] -T -e none -o BatchMode=yes -o StrictHostKeyChecking=yes -o ControlMaster=no \\
        -o ClearAllForwardings=yes -o RemoteCommand=none -o ConnectTimeout=N [-p PORT] [-l USER] -- HOST CMD

with the collector's payload written to its stdin and its stdout read as the JSON-line stream, exactly as over
a paramiko channel (``ssh.stream``). ProxyCommand, ProxyJump, certificates and ``@cert-authority``, GSSAPI,
agent settings and CheckHostIP work because ssh does them. The command line holds fixed options, the target
word ``parse_target`` validated (after ``--``), and the collector command of ``ssh.payload``; nothing else.

- Never a prompt: BatchMode, no controlling terminal (a session of its own, so no jump host's ssh can open
  /dev/tty either) and ``SSH_ASKPASS_REQUIRE=never``.
- Host keys: StrictHostKeyChecking is ``yes`` unless unknown keys may be recorded (``--accept-new``, the
  user's own ``accept-new``, or a key the user accepted in the app: ``OfferedHostKey``), then ``accept-new``;
  a changed or revoked key is refused every time. An unknown key's fingerprint is read through the same route
  by a second, verbose connection that stops at the key (nothing is authenticated or run).
- ControlMaster: an existing master (the user's ControlPath) is used; ``ControlMaster=no`` keeps ssh from
  ever starting one, and nothing here stops one.
- Every ssh runs in a process group of its own with its ProxyCommand; closing the link ends the group, so no
  ssh or proxy process outlives it, and gputui's exit ends any group still running (``end_at_exit``). The
  remote collector ends on its closed stdin.
- ssh's own failures (exit status 255) become one line from its stderr: auth and host-key failures are
  permanent (no retry storm), network failures are retried with backoff by the caller.
"""

from __future__ import annotations

import math
import signal
import threading
import time

from gputui.core.link import LinkError, LinkOptions, parse_target
from gputui.transports.ssh.config import SshSettings, config_file, find_ssh, target_words
from gputui.transports.ssh.errors import SetupFailed, phase_error, shown
from gputui.transports.ssh.hostkeys.accepted import OfferedHostKey, records_unknown_keys, take_accepted
from gputui.transports.ssh.openssh.process import (
    CONNECT_STEPS,
    EXIT_WAIT_S,
    FIXED_OPTIONS,
    POLITE_S,
    PROBE_COMMAND,
    PROBE_OPTIONS,
    SSH_FAILED,
    SshProcess,
    end_processes,
)

# -- the session ------------------------------------------------------------------------------------------


class OpenSshSession:
    """The ``ssh.interfaces.Session`` of the system ssh client: one ssh child per command.

    Args:
        target: The target word the user asked for (validated again here; it starts every error line).
        options: The link's options (connect timeout, ``accept_new``).
        settings: The target's resolved settings (known_hosts files and names, ConnectTimeout, the user's
            StrictHostKeyChecking).
        config_path: The ssh config file used instead of the defaults (``ssh -F``); default
            ``$GPUTUI_SSH_CONFIG``.
    """

    errors: tuple[type[BaseException], ...] = (OSError, EOFError)

    def __init__(
        self, target: str, options: LinkOptions, settings: SshSettings, *, config_path: str | None
    ) -> None:
        self.target = target
        self.options = options
        self.settings = settings
        self.config_file = config_file(config_path)
        self.spec = parse_target(target)
        self.timeout_s = settings.step_timeout_s(options.connect_timeout_s)
        self.accepting = take_accepted(target)
        """A key the user accepted in the app: this session records it (accept-new) and checks it."""
        self._lock = threading.Lock()
        self._ended: str | None = None
        self._procs: list[SshProcess] = []
        self._last: SshProcess | None = None
        """The ssh of the last command run (not a probe)."""

    @property
    def ended(self) -> str | None:
        with self._lock:
            return self._ended

    @property
    def strict_host_key_checking(self) -> str:
        """``accept-new`` when this connection may record an unknown key, else ``yes``; never weaker."""
        if self.accepting is not None or records_unknown_keys(self.options, self.settings):
            return "accept-new"
        return "yes"

    def argv(self, command: str, *, strict: str, extra: tuple[str, ...] = ()) -> list[str]:
        """The ssh command line that runs ``command`` on the target."""
        ssh = find_ssh()
        if ssh is None:
            raise SetupFailed(f"{self.target}: the OpenSSH client (ssh) is not installed")
        argv = [ssh]
        if self.config_file:
            argv += ["-F", self.config_file]
        argv += ["-T", "-e", "none"]
        connect_timeout = max(1, math.ceil(self.timeout_s))
        for option in (
            *FIXED_OPTIONS,
            f"StrictHostKeyChecking={strict}",
            f"ConnectTimeout={connect_timeout}",
            *extra,
        ):
            argv += ["-o", option]
        return [*argv, *target_words(self.spec), command]

    # -- Session --------------------------------------------------------------------------------------------

    def login(self, settings: SshSettings) -> None:
        """Nothing to do: each command's ssh logs in by itself (or through the user's running master)."""

    def start_timeout_s(self, timeout_s: float) -> float:
        return CONNECT_STEPS * timeout_s

    def exec(self, command: str, timeout_s: float) -> SshProcess:
        self._end_finished()
        proc = self._spawn(self.argv(command, strict=self.strict_host_key_checking))
        with self._lock:
            self._last = proc
        return proc

    def can_exec_again(self) -> bool:
        return self.ended is None

    def explain(self, error: LinkError) -> LinkError:
        """ssh's own failure in one line (``explain_failure``) when it failed; else ``error`` as it is."""
        with self._lock:
            proc = self._last
        if proc is None or proc.wait_exit(EXIT_WAIT_S) != SSH_FAILED:
            return error
        from gputui.transports.ssh.hostkeys.knownhosts import ChangedHostKey, RevokedHostKey
        from gputui.transports.ssh.openssh.failures import UNKNOWN_KEY_RE, explain_failure

        lines = proc.stderr_lines()
        failure = explain_failure(self.target, lines)
        unknown = UNKNOWN_KEY_RE.search("\n".join(lines))
        if unknown is not None and not isinstance(failure, ChangedHostKey | RevokedHostKey):
            return self._unknown_key(unknown.group(2), failure)
        return failure

    def collector_started(self) -> None:
        """Check that a key the user accepted is the one ssh recorded, before anything more is sent."""
        offer = self.accepting
        if offer is None:
            return
        from gputui.transports.ssh.hostkeys.knownhosts import (
            ChangedHostKey,
            fingerprint_sha256,
            load_known_hosts,
        )

        settings = self.settings
        known = load_known_hosts(settings.user_known_hosts_files + settings.global_known_hosts_files)
        recorded = {
            fingerprint_sha256(line.blob)
            for line in known
            if line.marker is None and line.matches(offer.lookup_name)
        }
        if offer.fingerprint not in recorded:
            name = shown(offer.lookup_name)
            raise ChangedHostKey(
                f"{self.target}: the host presented a key other than the {shown(offer.key_type)} "
                f"{offer.fingerprint} accepted for {name}, and ssh recorded it; not connecting (remove it "
                f"with ssh-keygen -R '{name}' and check the host)"
            )

    def abort(self, reason: str) -> None:
        with self._lock:
            if self._ended is None:
                self._ended = reason
            procs = list(self._procs)
        for proc in procs:
            proc.close()
            proc.signal_group(signal.SIGKILL)

    def close(self) -> None:
        with self._lock:
            if self._ended is None:
                self._ended = f"{self.target}: link closed"
            procs, self._procs = self._procs, []
        end_processes(procs, POLITE_S)

    # -- its steps -------------------------------------------------------------------------------------------

    def _spawn(self, argv: list[str]) -> SshProcess:
        ended = self.ended
        if ended is not None:
            raise LinkError(ended)
        try:
            proc = SshProcess(argv)
        except OSError as exc:
            raise phase_error(self.target, "cannot run ssh", exc) from None
        with self._lock:
            ended = self._ended
            if ended is None:
                self._procs.append(proc)
        if ended is not None:
            end_processes([proc], 0.0)
            raise LinkError(ended)
        return proc

    def _end_finished(self) -> None:
        """End the ssh processes whose command finished (the collector that found no python3)."""
        with self._lock:
            finished = [proc for proc in self._procs if proc.wait_exit(0.0) is not None]
            self._procs = [proc for proc in self._procs if proc not in finished]
        end_processes(finished, 0.0)

    def _unknown_key(self, name: str, refusal: LinkError) -> LinkError:
        """The refusal of an unknown key for ``name``, offering the key when its fingerprint can be read.

        A second connection, as strict and through the same route, says which key the host presents and
        stops there (``PROBE_OPTIONS``). A jump host's key cannot be accepted from here: ssh checks it in a
        process of its own, with the user's own settings.
        """
        from gputui.transports.ssh.hostkeys.knownhosts import HostKeyError, UnknownHostKey, lookup_name
        from gputui.transports.ssh.openssh.failures import SERVER_KEY_RE

        own_name = lookup_name(self.settings.hostname, self.settings.port, self.settings.host_key_alias)
        if name != own_name:
            return HostKeyError(
                f"{self.target}: unknown host key for {shown(name)} (a jump host); not connecting (connect "
                "to it once with ssh to check and accept its key)"
            )
        probe = self._spawn(self.argv(PROBE_COMMAND, strict="yes", extra=PROBE_OPTIONS))
        deadline = time.monotonic() + self.start_timeout_s(self.timeout_s)
        try:
            while time.monotonic() < deadline and probe.wait_exit(0.0) is None:
                if probe.recv(65536) == b"":
                    probe.wait_exit(min(1.0, max(0.0, deadline - time.monotonic())))
                    break
        except (EOFError, OSError):
            pass
        lines = probe.stderr_lines()
        with self._lock:
            if probe in self._procs:
                self._procs.remove(probe)
        end_processes([probe], 0.0)
        presented = None
        for line in lines:
            found = SERVER_KEY_RE.fullmatch(line)
            if found is not None:
                presented = found
        if presented is None:
            return HostKeyError(f"{refusal} (its fingerprint could not be read)")
        key_type, fingerprint = presented.group(1), presented.group(2)
        offer = OfferedHostKey(self.target, name, key_type, fingerprint)
        return UnknownHostKey(self.target, self.target, name, offer, key_type, None, fingerprint)
