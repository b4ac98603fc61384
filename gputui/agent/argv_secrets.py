"""Secrets in command lines, hidden before a command line leaves the host.

Servers are launched with their credentials in argv (``--api-key sk-…``, ``--hf-token hf_…``,
``HF_TOKEN=… python …``, ``--db postgres://user:pass@…``). gputui shows command lines on screen, in JSON
and in the audit log, and none of them may carry a secret: the collector replaces the value with
``REDACTED`` where it reads the command line, so it is never sent, shown or stored. The option and the
variable keep their names (an operator sees that a key was given, never which).

Found three ways: an option whose name says it holds a secret (``--api-key``, ``--token``, ``--password``,
``--hf_token``; not ``--ssl-keyfile``, a path, nor ``--max-tokens``), as ``--opt value`` or ``--opt=value``; a
``NAME=value`` word whose name says so (``HF_TOKEN=…``); and a value shaped like a well-known token (OpenAI's
``sk-``, Hugging Face's ``hf_``, GitHub's, Slack's, GitLab's, AWS access key ids) or the password of a URL.
"""

from __future__ import annotations

import re

REDACTED = "***"
"""What a secret reads as: the same mark the collector puts in a URL's password."""

_SECRET_WORDS = r"(?:api[-_]?key|apikey|key|token|secret|password|passwd|pass|pwd|credentials?|auth)"  # noqa: S105 - names, not a secret
_SECRET_OPTION = re.compile(r"^--?(?:[a-z0-9]+[-_])*" + _SECRET_WORDS + "$", re.IGNORECASE)
_SECRET_VARIABLE = re.compile(
    r"^(?:[A-Z0-9]+_)*(?:API_?KEY|KEY|TOKEN|SECRET|PASSWORD|PASSWD|PASS|CREDENTIALS?|AUTH)="
)
_TOKEN_SHAPE = re.compile(
    r"\b(?:sk-[A-Za-z0-9_-]{16,}|hf_[A-Za-z0-9]{16,}|gh[pousr]_[A-Za-z0-9]{20,}|github_pat_[A-Za-z0-9_]{20,}"
    r"|xox[abprs]-[A-Za-z0-9-]{10,}|glpat-[A-Za-z0-9_-]{16,}|AKIA[0-9A-Z]{16})"
)
_URL_PASSWORD = re.compile(r"(://[^/\s:@]*:)[^/\s@]+@")


def _secret_option(name: str) -> bool:
    return bool(_SECRET_OPTION.match(name))


def _shapes(arg: str) -> str:
    if "://" in arg:
        arg = _URL_PASSWORD.sub(r"\1" + REDACTED + "@", arg)
    return _TOKEN_SHAPE.sub(REDACTED, arg)


def redact_argv(argv: list[str]) -> list[str]:
    """``argv`` with every secret value replaced by ``REDACTED`` (a new list; the same one when none)."""
    out: list[str] = []
    hide_next = False
    changed = False
    for arg in argv:
        if hide_next:
            hide_next = False
            if not arg.startswith("--"):
                out.append(REDACTED)
                changed = True
                continue
        if arg.startswith("-") and len(arg) > 2:
            name, eq, _value = arg.partition("=")
            if _secret_option(name):
                if eq:
                    out.append(name + "=" + REDACTED)
                    changed = True
                else:
                    out.append(arg)
                    hide_next = True
                continue
        elif "=" in arg and _SECRET_VARIABLE.match(arg):
            out.append(arg.partition("=")[0] + "=" + REDACTED)
            changed = True
            continue
        shaped = _shapes(arg)
        changed = changed or shaped != arg
        out.append(shaped)
    return out if changed else argv
