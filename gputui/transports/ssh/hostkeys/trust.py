"""Whether to trust the key a host presented: one decision for connecting and for the user's "accept".

The known_hosts files themselves are read and written by ``knownhosts`` beside it; here the verdict becomes
an action: a known key passes, a revoked or changed one is refused always, and an unknown one is refused
(``UnknownHostKey``, carrying the key so the user can accept it) or recorded when the caller may record it
(``--accept-new``, ``StrictHostKeyChecking accept-new``, or the user's explicit accept).
"""

from __future__ import annotations

from gputui.core.link import LinkError
from gputui.transports.ssh.config import SshSettings, resolve
from gputui.transports.ssh.errors import phase_error
from gputui.transports.ssh.hostkeys.accepted import OfferedHostKey
from gputui.transports.ssh.hostkeys.knownhosts import (
    ChangedHostKey,
    KnownHostLine,
    RevokedHostKey,
    UnknownHostKey,
    check_host_key,
    fingerprint_sha256,
    load_known_hosts,
    lookup_name,
    record_host_key,
)

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any


def known_hosts(settings: SshSettings) -> tuple[str, list[KnownHostLine]]:
    """The known_hosts name of ``settings``' host and every line of its known_hosts files."""
    name = lookup_name(settings.hostname, settings.port, settings.host_key_alias)
    return name, load_known_hosts(settings.user_known_hosts_files + settings.global_known_hosts_files)


def trust_host_key(
    target: str,
    settings: SshSettings,
    name: str,
    known: list[KnownHostLine],
    key: Any,
    *,
    record_unknown: bool,
) -> str:
    """Decide on ``key``, presented by ``settings``' host under known_hosts name ``name``.

    Args:
        target: The target word the user asked for (starts every error line).
        settings: The resolved settings of the host that presented the key (a jump host's, for a hop).
        name: Its known_hosts name (``known_hosts``).
        known: The lines of its known_hosts files (``known_hosts``).
        key: The presented paramiko key.
        record_unknown: Append an unknown key to the first ``UserKnownHostsFile`` (hashed under
            ``HashKnownHosts yes``) instead of refusing it.

    Returns:
        The line appended, or "" when the key is known.

    Raises:
        RevokedHostKey, ChangedHostKey: Always for such a key.
        UnknownHostKey: An unknown key, not to be recorded.
        LinkError: There is no file to record it in, or it cannot be written.
    """
    blob = key.asbytes()
    key_type = key.get_name()
    verdict = check_host_key(known, name, blob)
    if verdict.status == "known":
        return ""
    fingerprint = fingerprint_sha256(blob)
    if verdict.status == "revoked" and verdict.line is not None:
        raise RevokedHostKey.at(target, name, key_type, fingerprint, verdict.line.where)
    if verdict.status == "changed" and verdict.line is not None:
        raise ChangedHostKey.at(target, name, key_type, fingerprint, verdict.line.where)
    if not record_unknown:
        raise UnknownHostKey(target, settings.target, name, key, key_type, blob)
    if not settings.user_known_hosts_files:
        raise LinkError(f"{target}: no UserKnownHostsFile to record the key of {name} in")
    path = settings.user_known_hosts_files[0]
    try:
        return record_host_key(path, name, key_type, blob, settings.hash_known_hosts)
    except OSError as exc:
        raise phase_error(target, f"cannot record the host key in {path}", exc) from None


def accept_host_key(
    target: str, key: Any, *, config_path: str | None = None, use_openssh: bool | None = None
) -> str:
    """Record an unknown host key after the user confirmed it (the TUI's "accept" button).

    Pass ``error.hop`` and ``error.key`` of the ``UnknownHostKey`` that was shown. The key is judged as a
    connect judges it (``trust_host_key``): a changed or revoked key is never recorded. A key the system ssh
    client refused (``OfferedHostKey``) is recorded by ssh itself: the next connection to the target runs
    with ``StrictHostKeyChecking=accept-new`` and checks that ssh recorded this very key.

    Returns:
        The line appended, or "" when the key was already known or ssh will write it.

    Raises:
        ChangedHostKey, RevokedHostKey: The key must not be accepted.
        LinkError: The target cannot be resolved or the file cannot be written.
    """
    if isinstance(key, OfferedHostKey):
        return key.accept()
    settings = resolve(target, config_path, use_openssh)
    name, known = known_hosts(settings)
    return trust_host_key(target, settings, name, known, key, record_unknown=True)
