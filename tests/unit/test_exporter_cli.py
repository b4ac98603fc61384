"""``gputui exporter``'s options: where it listens, and that its collector is read-only whatever is asked."""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

import pytest

from gputui.commands.exporter import ListenError, _link, is_loopback, parse_listen
from gputui.commands.grammar.exporter import DEFAULT_PORT
from gputui.commands.grammar.parser import build_parser
from gputui.core.link import LinkError
from gputui.core.store import Config


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("127.0.0.1:9000", ("127.0.0.1", 9000)),
        (":9000", ("127.0.0.1", 9000)),
        ("localhost:9000", ("127.0.0.1", 9000)),
        ("[::1]:9000", ("::1", 9000)),
        ("0.0.0.0:1", ("0.0.0.0", 1)),  # noqa: S104 - parsed, not bound
    ],
)
def test_listen_addresses(text: str, expected: tuple[str, int]) -> None:
    assert parse_listen(text) == expected


@pytest.mark.parametrize(
    "text", ["gpu-a:9000", "127.0.0.1", "127.0.0.1:0", "127.0.0.1:65536", "[::1]", "-x:1"]
)
def test_bad_listen_addresses_are_one_line(text: str) -> None:
    with pytest.raises(ListenError) as raised:
        parse_listen(text)
    assert "\n" not in str(raised.value)
    assert str(raised.value).startswith("--listen:")


def test_loopback_is_told_from_the_rest() -> None:
    assert is_loopback("127.0.0.1")
    assert is_loopback("::1")
    assert not is_loopback("0.0.0.0")  # noqa: S104
    assert not is_loopback("10.0.0.5")


def test_the_default_is_loopback_on_the_documented_port() -> None:
    args = build_parser("exporter").parse_intermixed_args([])
    assert parse_listen(args.listen) == ("127.0.0.1", DEFAULT_PORT)


def test_the_collector_is_read_only_and_refuses_a_kill() -> None:
    """Even asked through its link (nothing the exporter serves can ask it), the collector signals nothing."""
    args = build_parser("exporter").parse_intermixed_args(["--no-discover"])
    args.config = Config()
    child = subprocess.Popen(["sleep", "60"])
    link = _link(args)
    try:
        ticks = int(Path(f"/proc/{child.pid}/stat").read_text().rsplit(")", 1)[1].split()[19])
        link.open()
        command = {"cmd": "kill", "targets": [{"pid": child.pid, "start_ticks": ticks}], "signal": "KILL"}
        try:
            reply = link.request(command, 10.0)
        except LinkError as exc:
            reply = {"error": str(exc)}
        assert "read-only" in json.dumps(reply)
        time.sleep(0.2)
        assert child.poll() is None  # still running
    finally:
        link.close()
        child.kill()
        child.wait()
