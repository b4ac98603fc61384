"""The target grammar: a word that names a host (``[user@]host[:port]``, ``[v6]:port``, ``ssh://``), never an
option or a shell word, wherever it came from (the command line, a hosts file, a Prometheus label)."""

from __future__ import annotations

import re

from gputui.core.link.interface import LinkError
from gputui.core.model import Record

_HOST_RE = re.compile(r"[A-Za-z0-9_](?:[A-Za-z0-9._-]*)")
_V6_RE = re.compile(r"[0-9A-Fa-f:.]+(?:%[A-Za-z0-9_.-]+)?")
_USER_RE = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._+-]*")
_PORT_RE = re.compile(r"[0-9]{1,5}")


class BadTarget(LinkError):
    """The target word cannot name a host (it would be unsafe or meaningless to pass on)."""

    permanent = True


class TargetSpec(Record):
    """A target word taken apart: ``[user@]host[:port]``; user and port None when not given."""

    host: str
    user: str | None = None
    port: int | None = None


def _bad(word: str, why: str) -> BadTarget:
    return BadTarget(f"invalid ssh target {word!r}: {why}")


def parse_target(word: str) -> TargetSpec:
    """Split and validate a target word.

    Only letters, digits, ``._-`` in host names (``._+-`` in user names) are allowed, so a target can never
    become an option (leading ``-``) or a shell word for OpenSSH's ``Match exec`` / ``%h`` expansion.

    Raises:
        BadTarget: With one line naming the problem.
    """
    if not word:
        raise _bad(word, "empty")
    if word.startswith("-"):
        raise _bad(word, "must not start with '-'")
    if any(c.isspace() or ord(c) < 32 or 127 <= ord(c) < 160 for c in word):
        raise _bad(word, "contains whitespace or control characters")
    rest = word[len("ssh://") :] if word.startswith("ssh://") else word
    user: str | None = None
    if "@" in rest:
        user, rest = rest.rsplit("@", 1)
        if not _USER_RE.fullmatch(user):
            raise _bad(word, "user names may hold only letters, digits and . _ + -")
    port_text: str | None = None
    if rest.startswith("["):
        end = rest.find("]")
        if end < 0:
            raise _bad(word, "missing ']'")
        host, after = rest[1:end], rest[end + 1 :]
        if after:
            if not after.startswith(":"):
                raise _bad(word, "expected ':port' after ']'")
            port_text = after[1:]
        if not (_V6_RE.fullmatch(host) or _HOST_RE.fullmatch(host)):
            raise _bad(word, "not an address inside [...]")
    elif rest.count(":") >= 2:
        host = rest
        if not _V6_RE.fullmatch(host):
            raise _bad(word, "not an IPv6 address (write [addr]:port for a port)")
    else:
        host, _, port_text_or_empty = rest.partition(":")
        port_text = port_text_or_empty if ":" in rest else None
        if not _HOST_RE.fullmatch(host):
            raise _bad(word, "host names may hold only letters, digits and . _ -")
    port: int | None = None
    if port_text is not None:
        if not _PORT_RE.fullmatch(port_text) or not 1 <= int(port_text) <= 65535:
            raise _bad(word, "port must be a number from 1 to 65535")
        port = int(port_text)
    return TargetSpec(host=host, user=user, port=port)
