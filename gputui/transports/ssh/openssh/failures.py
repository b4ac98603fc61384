"""ssh's failures in one line."""

from __future__ import annotations

import re

from gputui.core.link import LinkError
from gputui.transports.ssh.errors import AuthFailed, SetupFailed, shown
from gputui.transports.ssh.hostkeys.knownhosts import (
    ChangedHostKey,
    HostKeyError,
    RevokedHostKey,
)
from gputui.transports.ssh.openssh.process import SSH_FAILED

UNKNOWN_KEY_RE = re.compile(r"No (\S+) host key is known for (\S+) and you have requested strict checking")
_CHANGED_RE = re.compile(r"Host key for (\S+) has changed and you have requested strict checking")
_SENT_RE = re.compile(r"The fingerprint for the (\S+) key sent by the remote host is")
_FINGERPRINT_RE = re.compile(r"(SHA256:[A-Za-z0-9+/]+)")
_OFFENDING_RE = re.compile(r"Offending \S+ key in (\S+:\d+)")
_REVOKED_RE = re.compile(r"The (\S+) host key for (\S+) is marked as revoked")
SERVER_KEY_RE = re.compile(r"debug1: Server host key: (\S+) (SHA256:[A-Za-z0-9+/]+)")
_CONNECTION_ENDED_RE = re.compile(r"Connection (?:to|closed by) \S+ port \d+")
"""ssh's closing words after a failure it has already named on the line before."""
HOST_KEY_FAILED = "Host key verification failed."
AUTH_FAILURES = ("Permission denied", "Too many authentication failures", "Authentication failed")
CONFIG_FAILURES = ("Bad configuration option", "command-line line", "Bad owner or permissions")
NOISE_PREFIXES = ("Warning: Permanently added", "debug1:")
"""stderr lines that never explain a failure."""


# -- ssh's failures in one line ---------------------------------------------------------------------------


def explain_failure(target: str, lines: list[str]) -> LinkError:
    """The error for ssh's failure (exit status 255) from its stderr ``lines``.

    Host-key and authentication failures are permanent (``worth_retrying`` is False for them), a broken
    configuration too; a network failure is a plain LinkError, worth retrying. An unknown host key gives a
    ``HostKeyError`` here; ``OpenSshSession`` reads its fingerprint and offers it instead.
    """
    text = "\n".join(lines)
    if HOST_KEY_FAILED in text or "REMOTE HOST IDENTIFICATION HAS CHANGED" in text:
        return _host_key_failure(target, lines, text)
    for line in reversed(lines):
        if any(marker in line for marker in AUTH_FAILURES):
            return AuthFailed(f"{target}: authentication failed: {shown(line)}")
    telling = [line for line in lines if not line.startswith(NOISE_PREFIXES)]
    if not telling:
        return LinkError(f"{target}: ssh failed (exit status {SSH_FAILED}) without saying why")
    last = telling[-1]
    if any(marker in last for marker in CONFIG_FAILURES):
        return SetupFailed(f"{target}: {shown(last)}")
    detail = shown(last)
    if len(telling) > 1 and _CONNECTION_ENDED_RE.match(last):
        detail = f"{shown(telling[-2])} ({detail})"
    return LinkError(f"{target}: {detail}")


def _host_key_failure(target: str, lines: list[str], text: str) -> HostKeyError:
    changed = _CHANGED_RE.search(text)
    if changed is not None or "REMOTE HOST IDENTIFICATION HAS CHANGED" in text:
        sent = _SENT_RE.search(text)
        offending = _OFFENDING_RE.search(text)
        return ChangedHostKey.at(
            target,
            shown(changed.group(1)) if changed else "the host",
            shown(sent.group(1)) if sent else "a key",
            _fingerprint_after(lines, _SENT_RE) or "(no fingerprint shown)",
            shown(offending.group(1)) if offending else "known_hosts",
        )
    revoked = _REVOKED_RE.search(text)
    if revoked is not None:
        return RevokedHostKey.at(target, shown(revoked.group(2)), shown(revoked.group(1)), None, None)
    unknown = UNKNOWN_KEY_RE.search(text)
    if unknown is not None:
        key_type, name = shown(unknown.group(1)), shown(unknown.group(2))
        return HostKeyError(f"{target}: unknown {key_type} host key for {name}; not connecting")
    if lines and lines[-1] != HOST_KEY_FAILED:
        # The ssh of a ProxyJump or ProxyCommand hop refused its host's key, and the connection it carried
        # closed: that hop's key is for the user to check, with ssh itself.
        return HostKeyError(
            f"{target}: the host key of a jump host was refused (its ssh: {HOST_KEY_FAILED}); not connecting "
            "(connect to the jump host once with ssh to check and accept its key)"
        )
    return HostKeyError(f"{target}: host key verification failed; not connecting")


def _fingerprint_after(lines: list[str], pattern: re.Pattern[str]) -> str | None:
    """The SHA256 fingerprint on the line matching ``pattern`` or the line after it."""
    for index, line in enumerate(lines):
        if pattern.search(line):
            for candidate in lines[index : index + 2]:
                found = _FINGERPRINT_RE.search(candidate)
                if found is not None:
                    return found.group(1)
    return None
