"""Which SSH client reaches a host: the one rule, for the TUI, the exporter and the one-shot commands alike.

``--ssh-client`` (or the config's ``ssh_client``, globally or per host) names one of ``SSH_CLIENTS``:

* ``paramiko``: built in; an unknown host key is asked about in the TUI (the host-key dialog).
* ``openssh``: the system ``ssh``: everything the user's ssh config says, as ``ssh`` does it.
* ``auto``: the system ``ssh`` wherever one is installed (one-shot commands' default: a running
  ControlMaster is shared, and its key exchange costs less than importing paramiko and making its handshake).
* ``config``: per host, by what its ssh config needs (the TUI's and the exporter's default): the system
  ``ssh`` for a ProxyCommand, a ProxyJump, a certificate, Kerberos (GSSAPI) or a running ControlMaster;
  paramiko wherever it serves, so that a new host's key is asked about rather than refused. A host that
  ``gputui snapshot`` reaches, the TUI reaches.

The system ``ssh`` is used only where it is installed; without it, paramiko (which then names what it
cannot do, and ``--ssh-client openssh``, when it fails).
"""

from __future__ import annotations

from gputui.transports.ssh.config import SshSettings, openssh_available

PARAMIKO = "paramiko"
OPENSSH = "openssh"
AUTO = "auto"
BY_CONFIG = "config"


def needs_system_ssh(settings: SshSettings) -> tuple[str, ...]:
    """What the host's ssh config asks for that the TUI leaves to the system ``ssh``, one phrase each."""
    needs = list(settings.openssh_only())
    if settings.proxy_jump:
        needs.append("ProxyJump")
    return tuple(needs)


def choose_client(requested: str, settings: SshSettings, installed: bool | None = None) -> str:
    """``paramiko`` or ``openssh`` for one open of the host ``settings`` resolve (see the module docstring).

    Args:
        requested: One of ``SSH_CLIENTS``.
        settings: The host's resolved ssh settings.
        installed: Whether the system ``ssh`` is installed (default: looked up).
    """
    if requested == PARAMIKO:
        return PARAMIKO
    if requested == OPENSSH:
        return OPENSSH
    available = openssh_available() if installed is None else installed
    if not available:
        return PARAMIKO
    if requested == AUTO:
        return OPENSSH
    return OPENSSH if needs_system_ssh(settings) else PARAMIKO
