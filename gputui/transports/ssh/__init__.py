"""Remote hosts over SSH (paramiko): the collector is shipped over one exec channel."""

from gputui.transports.ssh.link import (
    LINE_CAP_BYTES,
    AuthFailed,
    SetupFailed,
    SshLink,
    accept_host_key,
    reduced_command,
)
from gputui.transports.ssh.payload import (
    AgentPayload,
    agent_command,
    agent_loader,
    agent_payload,
    agent_source,
)

__all__ = [
    "LINE_CAP_BYTES",
    "AgentPayload",
    "AuthFailed",
    "SetupFailed",
    "SshLink",
    "accept_host_key",
    "agent_command",
    "agent_loader",
    "agent_payload",
    "agent_source",
    "reduced_command",
]
