"""paramiko without invoke.

paramiko's ``config`` module imports invoke (when it is installed) as it is imported, only to run the
``Match exec`` lines of an SSH config it parses, and invoke costs more to import than the rest of a remote
one-shot's client. gputui reads SSH configs with ``ssh -G``; paramiko's parser is its fallback
(``sshconfig.resolve_with_paramiko``), which gets invoke back for a config that has such a line.
"""

from __future__ import annotations

import sys

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any


def block_invoke() -> None:
    """Make paramiko's ``import invoke`` fail with ImportError (which paramiko catches) until
    :func:`give_paramiko_invoke`; changes nothing once paramiko or invoke is loaded."""
    if "invoke" not in sys.modules and "paramiko" not in sys.modules:
        sys.modules["invoke"] = None  # type: ignore[assignment]  # the import system's "not importable" mark


def import_paramiko() -> Any:
    """The paramiko module, loaded without invoke when it is loaded first here."""
    block_invoke()
    import paramiko

    return paramiko


def give_paramiko_invoke(paramiko_config: Any) -> None:
    """Hand invoke, when installed, to paramiko's config parser (``paramiko.config``) for ``Match exec``."""
    if getattr(paramiko_config, "invoke", None) is not None:
        return
    if "invoke" in sys.modules and sys.modules["invoke"] is None:
        del sys.modules["invoke"]
    try:
        import invoke
    except ImportError as exc:  # not installed: paramiko raises this for a Match exec line, as it would
        paramiko_config.invoke_import_error = exc
        return
    paramiko_config.invoke = invoke
