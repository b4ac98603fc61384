"""ssh's own failures (exit status 255) as one error line: the kind decides whether the caller retries.

The real ``ssh`` against real sshd's is in ``tests/integration/test_openssh_*.py`` and ``test_ssh_faults.py``;
here are the stderr texts those peers do not produce, such as bytes a ProxyCommand or a name put there.
"""

from __future__ import annotations

from gputui.core.link import LinkError
from gputui.transports.reconnect import worth_retrying
from gputui.transports.ssh import AuthFailed, SetupFailed
from gputui.transports.ssh.openssh.failures import explain_failure


def test_the_last_telling_line_is_shown_escaped_on_one_line() -> None:
    hostile = "ssh: connect to host gpu-a port 22: No route to host \x1b[2J\x1b]0;t\x07 \u202e \x9b"
    error = explain_failure(
        "gpu-a", ["debug1: Reading configuration data", hostile, "Warning: Permanently added"]
    )
    assert type(error) is LinkError
    assert worth_retrying(error)
    text = str(error)
    assert text.startswith("gpu-a: ssh: connect to host gpu-a port 22: No route to host ")
    assert "\n" not in text
    assert not any(ch in text for ch in ("\x1b", "\x07", "\x9b", "\u202e"))


def test_authentication_and_configuration_failures_are_not_retried() -> None:
    auth = explain_failure(
        "gpu-a",
        ["Warning: Permanently added", "ops@gpu-a: Permission denied (publickey,keyboard-interactive)."],
    )
    assert isinstance(auth, AuthFailed)
    assert not worth_retrying(auth)
    assert str(auth) == (
        "gpu-a: authentication failed: ops@gpu-a: Permission denied (publickey,keyboard-interactive)."
    )
    config = explain_failure("gpu-a", ["/home/ops/.ssh/config: line 3: Bad configuration option: frobnicate"])
    assert isinstance(config, SetupFailed)
    assert not worth_retrying(config)


def test_an_ssh_that_said_nothing_useful_says_so() -> None:
    error = explain_failure("gpu-a", ["debug1: Authenticating to gpu-a:22"])
    assert str(error) == "gpu-a: ssh failed (exit status 255) without saying why"
    assert worth_retrying(error)
