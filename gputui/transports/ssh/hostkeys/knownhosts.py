"""Host key checking against OpenSSH known_hosts files, done by hand.

paramiko's own loader raises on ``@cert-authority`` / ``@revoked`` markers and knows neither negated patterns
nor revocation, so this module parses known_hosts lines itself, the way OpenSSH's ``hostfile.c`` does:

- ``[@marker] patterns keytype base64-blob [comment]``; blank lines and ``#`` comments are skipped, a line
  that cannot be parsed is skipped (a broken line must not hide the good ones).
- ``patterns`` is a comma list of ``*``/``?`` wildcards, each optionally negated with ``!`` (a matching
  negated pattern excludes the line), or one hashed entry ``|1|base64(salt)|base64(HMAC-SHA1(salt, name))``.
- The name looked up is ``host`` for port 22 and ``[host]:port`` otherwise (or the ``HostKeyAlias``).
- ``@revoked`` keys are refused for every host. ``@cert-authority`` lines are CA keys for host certificates,
  which this client does not verify: they never count as the host's key (that would trust the CA key itself).

Verdicts: the presented key is *known* (a plain line for this name carries it), *revoked*, *changed* (the name
has plain lines but none carries this key — refused always, naming the file and line), or *unknown* (refused
with its SHA256 fingerprint unless the caller accepts it, which appends one line to the user's known_hosts).
"""

from __future__ import annotations

import base64
import binascii
import os
import re
from pathlib import Path

from gputui.agent.safefile import UnsafeFile, read_plain
from gputui.core.link import LinkError
from gputui.core.model import Record
from gputui.transports.ssh.config import KNOWN_HOSTS_MAX_BYTES

MARKER_CERT_AUTHORITY = "@cert-authority"
MARKER_REVOKED = "@revoked"
HASH_MAGIC = "|1|"
HASH_SALT_BYTES = 20


class HostKeyError(LinkError):
    """The host's key is not trusted; the message names the host and why."""

    permanent = True
    """Retrying cannot help: the user must act (see ``reconnect.worth_retrying``)."""


class UnknownHostKey(HostKeyError):
    """No known_hosts line names this host: nothing was written, the user must accept it first.

    Attributes:
        target: The target word the user asked for.
        hop: The target word of the host whose key this is (differs from ``target`` for a ProxyJump hop); pass
            it with ``key`` to ``gputui.transports.ssh.accept_host_key`` after the user confirmed.
        lookup_name: The known_hosts name (``host`` or ``[host]:port``).
        key: The presented paramiko key, or what the system ssh client refused
            (``gputui.transports.ssh.hostkeys.accepted.OfferedHostKey``).
        key_type: Its type, e.g. ``ssh-ed25519``.
        blob: The public key blob, when known (the system ssh client names the key by fingerprint only).
        fingerprint: ``SHA256:...`` as OpenSSH prints it.
    """

    def __init__(
        self,
        target: str,
        hop: str,
        lookup_name: str,
        key: object,
        key_type: str,
        blob: bytes | None,
        fingerprint: str | None = None,
    ) -> None:
        self.target = target
        self.hop = hop
        self.lookup_name = lookup_name
        self.key = key
        self.key_type = key_type
        self.blob = blob
        if fingerprint is None:
            if blob is None:
                raise ValueError("an unknown host key needs its blob or its fingerprint")
            fingerprint = fingerprint_sha256(blob)
        self.fingerprint = fingerprint
        via = "" if hop == target else f" (jump host {hop})"
        super().__init__(
            f"{target}: unknown host key for {lookup_name}{via}: {key_type} {self.fingerprint}; "
            "not connecting (accept it in the app or with --accept-new)"
        )


class ChangedHostKey(HostKeyError):
    """The host presents a key other than the one recorded for it: refused, always."""

    @classmethod
    def at(cls, target: str, name: str, key_type: str, fingerprint: str, where: str) -> ChangedHostKey:
        """The refusal of ``key_type fingerprint`` for ``name``, another key being recorded at ``where``."""
        return cls(
            f"{target}: HOST KEY CHANGED for {name}: it presents {key_type} {fingerprint} but {where} "
            "records another key; refusing to connect (remove that line if the change is expected)"
        )


class RevokedHostKey(HostKeyError):
    """The presented key is marked ``@revoked``: refused, always."""

    @classmethod
    def at(
        cls, target: str, name: str, key_type: str, fingerprint: str | None, where: str | None
    ) -> RevokedHostKey:
        """The refusal of ``key_type fingerprint`` for ``name``, marked ``@revoked`` in ``where`` (the
        system ssh client names neither the fingerprint nor the line)."""
        key = f"{key_type} {fingerprint}" if fingerprint else key_type
        place = f" in {where}" if where else ""
        return cls(f"{target}: the host key of {name} ({key}) is marked @revoked{place}; refusing to connect")


class KnownHostLine(Record):
    """One parsed known_hosts line.

    Attributes:
        path: The file it came from.
        lineno: 1-based line number.
        marker: None, ``@cert-authority`` or ``@revoked``.
        patterns: The host field split on commas (one entry for a hashed field).
        key_type: The key type word, e.g. ``ssh-ed25519``.
        blob: The decoded public key blob.
    """

    path: str
    lineno: int
    marker: str | None
    patterns: tuple[str, ...]
    key_type: str
    blob: bytes

    @property
    def where(self) -> str:
        return f"{self.path}:{self.lineno}"

    def matches(self, name: str) -> bool:
        """Whether this line's host field selects ``name`` (OpenSSH ``match_hostname`` rules)."""
        return host_field_matches(self.patterns, name)


def _hmac_sha1(salt: bytes, name: str) -> bytes:
    import hmac  # with hashlib, it maps libcrypto: loaded by the first SSH host, not by every TUI

    return hmac.digest(salt, name.encode("utf-8"), "sha1")


def fingerprint_sha256(blob: bytes) -> str:
    """OpenSSH's fingerprint: ``SHA256:`` + unpadded base64 of the SHA-256 of the key blob."""
    import hashlib

    return "SHA256:" + base64.b64encode(hashlib.sha256(blob).digest()).decode("ascii").rstrip("=")


def lookup_name(host: str, port: int, host_key_alias: str | None = None) -> str:
    """The name OpenSSH looks up in known_hosts for a host and port."""
    if host_key_alias:
        return host_key_alias
    return host if port == 22 else f"[{host}]:{port}"


def _wildcard_regex(pattern: str) -> re.Pattern[str]:
    # Only '*' and '?' are special in OpenSSH patterns; '[' is literal (think "[host]:port").
    parts = [".*" if c == "*" else "." if c == "?" else re.escape(c) for c in pattern.lower()]
    return re.compile("".join(parts), re.DOTALL)


def _hashed_matches(entry: str, name: str) -> bool:
    fields = entry[len(HASH_MAGIC) :].split("|")
    if len(fields) != 2:
        return False
    try:
        salt = base64.b64decode(fields[0], validate=True)
        expected = base64.b64decode(fields[1], validate=True)
    except (binascii.Error, ValueError):
        return False
    import hmac

    return hmac.compare_digest(_hmac_sha1(salt, name), expected)


def host_field_matches(patterns: tuple[str, ...] | list[str], name: str) -> bool:
    """Whether a known_hosts host field (already split on commas) selects ``name``."""
    if len(patterns) == 1 and patterns[0].startswith(HASH_MAGIC):
        return _hashed_matches(patterns[0], name)
    lowered = name.lower()
    positive = False
    for pattern in patterns:
        negated = pattern.startswith("!")
        body = pattern[1:] if negated else pattern
        if not body:
            continue
        if _wildcard_regex(body).fullmatch(lowered):
            if negated:
                return False
            positive = True
    return positive


def parse_known_hosts(text: str, path: str) -> list[KnownHostLine]:
    """Parse known_hosts text; lines that cannot be parsed are skipped."""
    lines: list[KnownHostLine] = []
    for lineno, raw in enumerate(text.splitlines(), start=1):
        words = raw.strip().split()
        if not words or words[0].startswith("#"):
            continue
        marker: str | None = None
        if words[0].startswith("@"):
            if words[0] not in (MARKER_CERT_AUTHORITY, MARKER_REVOKED):
                continue
            marker = words[0]
            words = words[1:]
        if len(words) < 3:
            continue
        host_field, key_type, key_b64 = words[0], words[1], words[2]
        try:
            blob = base64.b64decode(key_b64, validate=True)
        except (binascii.Error, ValueError):
            continue
        if not blob:
            continue
        patterns = (host_field,) if host_field.startswith(HASH_MAGIC) else tuple(host_field.split(","))
        lines.append(KnownHostLine(path, lineno, marker, patterns, key_type, blob))
    return lines


def load_known_hosts(paths: list[str] | tuple[str, ...]) -> list[KnownHostLine]:
    """Every parsable line of the files that exist (missing files count as empty).

    Raises:
        LinkError: A file is no regular file (a FIFO would hang the read), is over
            ``KNOWN_HOSTS_MAX_BYTES`` or cannot be read: one line naming it.
    """
    lines: list[KnownHostLine] = []
    for path in paths:
        try:
            data = read_plain(os.path.expanduser(path), KNOWN_HOSTS_MAX_BYTES)
        except UnsafeFile as exc:
            raise LinkError(f"known hosts: {exc}") from None
        if data is not None:
            lines.extend(parse_known_hosts(data.decode("utf-8", "replace"), path))
    return lines


def known_key_types(lines: list[KnownHostLine], name: str) -> list[str]:
    """Key types recorded for ``name`` (plain lines only), in file order without repeats."""
    types: list[str] = []
    for line in lines:
        if line.marker is None and line.key_type not in types and line.matches(name):
            types.append(line.key_type)
    return types


class HostKeyCheck(Record):
    """The verdict for one presented key: status is known, unknown, changed or revoked."""

    status: str
    line: KnownHostLine | None = None


def check_host_key(lines: list[KnownHostLine], name: str, blob: bytes) -> HostKeyCheck:
    """Judge the key blob a host presented under known_hosts name ``name``."""
    for line in lines:
        if line.marker == MARKER_REVOKED and line.blob == blob:
            return HostKeyCheck("revoked", line)
    recorded = [line for line in lines if line.marker is None and line.matches(name)]
    for line in recorded:
        if line.blob == blob:
            return HostKeyCheck("known", line)
    if recorded:
        return HostKeyCheck("changed", recorded[0])
    return HostKeyCheck("unknown")


def hash_name(name: str, salt: bytes | None = None) -> str:
    """The hashed known_hosts form of ``name`` (what ``HashKnownHosts yes`` writes)."""
    salt = os.urandom(HASH_SALT_BYTES) if salt is None else salt
    digest = _hmac_sha1(salt, name)
    return f"{HASH_MAGIC}{base64.b64encode(salt).decode('ascii')}|{base64.b64encode(digest).decode('ascii')}"


def record_host_key(path: str, name: str, key_type: str, blob: bytes, hashed: bool) -> str:
    """Append one known_hosts line for ``name`` to ``path`` (creating it 0600, its folder 0700).

    Args:
        hashed: Write the name hashed, as OpenSSH does under ``HashKnownHosts yes``.

    Returns:
        The line written, without its newline.
    """
    host_field = hash_name(name) if hashed else name
    line = f"{host_field} {key_type} {base64.b64encode(blob).decode('ascii')}"
    target = Path(path)
    target.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    fd = os.open(target, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    try:
        prefix = ""
        size = os.fstat(fd).st_size
        if size:
            with open(target, "rb") as existing:
                existing.seek(size - 1)
                if existing.read(1) != b"\n":
                    prefix = "\n"
        os.write(fd, f"{prefix}{line}\n".encode())
    finally:
        os.close(fd)
    return line
