"""Logging in with public keys only: the ssh-agent's keys and the resolved identity files, never a prompt.

Each key is offered once on one connection (sshd's MaxAuthTries and PerSourcePenalties punish more), and a
failure names every key tried or skipped, and why.
"""

from __future__ import annotations

import base64
import binascii
import os
import socket
from pathlib import Path

import paramiko
import paramiko.agent

from gputui.agent.safefile import UnsafeFile, read_plain
from gputui.transports.ssh.config import IDENTITY_MAX_BYTES, SshSettings
from gputui.transports.ssh.errors import AuthFailed, shown

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

KEY_DETAIL_CHARS = 60
"""Most characters of a library message quoted for one key in the list of keys tried."""


def authenticate(transport: Any, settings: SshSettings, target: str, timeout_s: float) -> None:
    """Log in on ``transport`` as ``settings.user``; raises AuthFailed (one line naming every key tried).

    Args:
        transport: A paramiko transport past its key exchange and host key check.
        settings: The resolved settings of the host (user, identity files, IdentitiesOnly, IdentityAgent).
        target: The target word the user asked for (starts the error line).
        timeout_s: Deadline for every read from the ssh-agent.
    """
    tried: list[str] = []
    file_blobs: dict[bytes, str] = {}
    for path in settings.identity_files:
        public = _public_blob(path)
        if public is not None:
            file_blobs[public] = path
    agent_keys: list[Any] = []
    agent: _AgentAt | None = None
    agent_path = _agent_socket_path(settings.identity_agent)
    if agent_path is not None:
        try:
            agent = _AgentAt(agent_path, timeout_s)
            agent_keys = list(agent.get_keys())
        except (paramiko.SSHException, OSError, EOFError) as exc:
            detail = shown(str(exc) or type(exc).__name__, KEY_DETAIL_CHARS)
            tried.append(f"ssh-agent at {agent_path} ({detail})")
    try:
        _try_keys(transport, settings, target, tried, _candidates(settings, tried, agent_keys, file_blobs))
    finally:
        if agent is not None:
            agent.close()


def _candidates(
    settings: SshSettings, tried: list[str], agent_keys: list[Any], file_blobs: dict[bytes, str]
) -> list[tuple[str, Any]]:
    """The keys to offer, each once, as (label, key): the agent's first, then the identity files' own."""
    candidates: list[tuple[str, Any]] = []
    seen_blobs: set[bytes] = set()
    for key in agent_keys:
        blob = key.asbytes()
        if settings.identities_only and blob not in file_blobs:
            continue
        seen_blobs.add(blob)
        label = f"agent key {file_blobs.get(blob) or key.get_name()}"
        candidates.append((label, key))
    for path in settings.identity_files:
        if not Path(path).exists():
            continue
        try:
            read_plain(path, IDENTITY_MAX_BYTES)  # a FIFO or a device would hang paramiko's read
            key = paramiko.PKey.from_path(path)
        except (paramiko.PasswordRequiredException, TypeError):
            # TypeError is cryptography's way of saying "encrypted, and no password given".
            if _public_blob(path) not in seen_blobs:
                tried.append(f"{path} (encrypted, not in ssh-agent: skipped)")
            continue
        except (paramiko.SSHException, OSError, ValueError, UnsafeFile) as exc:
            tried.append(f"{path} (unusable: {shown(str(exc), KEY_DETAIL_CHARS)})")
            continue
        if key.asbytes() in seen_blobs:
            continue
        seen_blobs.add(key.asbytes())
        candidates.append((path, key))
    return candidates


def _try_keys(
    transport: Any, settings: SshSettings, target: str, tried: list[str], candidates: list[tuple[str, Any]]
) -> None:
    for label, key in candidates:
        try:
            transport.auth_publickey(settings.user, key)
        except paramiko.BadAuthenticationType as exc:
            tried.append(f"{label} (server allows only {', '.join(exc.allowed_types) or 'nothing'})")
            break
        except paramiko.AuthenticationException:
            tried.append(f"{label} (rejected)")
            continue
        except (paramiko.SSHException, OSError, EOFError) as exc:
            tried.append(f"{label} ({shown(str(exc), KEY_DETAIL_CHARS)})")
            break
        if transport.is_authenticated():
            return
        tried.append(f"{label} (needs a further method)")
    if not candidates and not tried:
        tried.append("no keys: ssh-agent empty or absent and no identity file found")
    where = f"{settings.user}@{settings.hostname} port {settings.port}"
    raise AuthFailed(f"{target}: authentication failed for {where}; tried: {'; '.join(tried)}")


class _AgentAt(paramiko.agent.AgentSSH):
    """An ssh-agent client for a given socket path, with a deadline on every read (a hung agent must not
    hang the connect)."""

    def __init__(self, path: str, timeout_s: float) -> None:
        super().__init__()
        conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        conn.settimeout(timeout_s)
        try:
            conn.connect(path)
        except OSError:
            conn.close()
            raise
        self._connect(conn)  # type: ignore[attr-defined]

    def close(self) -> None:
        self._close()  # type: ignore[attr-defined]


def _agent_socket_path(identity_agent: str | None) -> str | None:
    """The agent socket OpenSSH would use for ``IdentityAgent`` (default ``$SSH_AUTH_SOCK``); None: none."""
    value = identity_agent or "SSH_AUTH_SOCK"
    if value.lower() == "none":
        return None
    if value == "SSH_AUTH_SOCK":
        return os.environ.get("SSH_AUTH_SOCK") or None
    if value.startswith("$"):
        return os.environ.get(value[1:].strip("{}")) or None
    return os.path.expanduser(value)


def _public_blob(path: str) -> bytes | None:
    """The key blob of ``path``.pub, when that file exists (lets encrypted keys be matched to agent keys)."""
    try:
        data = read_plain(f"{path}.pub", IDENTITY_MAX_BYTES)
        words = [] if data is None else data.decode("ascii", "replace").split()
        return base64.b64decode(words[1], validate=True) if len(words) >= 2 else None
    except (OSError, binascii.Error, ValueError, UnsafeFile):
        return None
