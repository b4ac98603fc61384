"""One host state, every view: the same verdict, the same reasons, the same finding sentences.

Each state is recorded once from real processes (``tests.contract.record`` in a subprocess: the fake NVML,
the real collector, a real sglang-shaped launcher with a real defunct scheduler and a real HTTP server that
answers 503) and then rendered in-process by ``snapshot`` (text and JSON), ``check`` (text, JSON, exit
code) and the TUI (Pilot), each fed the recorded sample through a link that replays it. The views must not
disagree: a view that recomputes a reason, or words it its own way, fails here.
"""

from __future__ import annotations

import asyncio
import io
import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gputui.agent.protocol import ENDPOINT_STATE_DOWN, ENDPOINT_STATE_STARTING, ENDPOINT_STATE_UNHEALTHY
from gputui.commands import check as check_command
from gputui.commands import snapshot as snapshot_command
from gputui.commands.grammar.parser import build_parser
from gputui.core.link import HostLink, LinkError
from gputui.core.model import CANNOT_TELL, CLEAN, EXIT_CODES, NOT_CLEAN, NOT_READY, HostSnapshot
from gputui.core.text import age_since
from gputui.core.verdict import headline
from gputui.transports.sim import ManualClock
from gputui.ui.app import GpuTuiApp
from gputui.ui.widgets.clean_slate import CleanSlateLine
from gputui.ui.widgets.endpoint_panel import EndpointPanel
from gputui.ui.widgets.findings_list import FindingsList, group_findings
from tests.contract.wedged import free_port, install, wedged_launcher
from tests.fakenvml.plugin import FakeNvml
from tests.integration.defunct import build_defunct_leader
from tests.integration.procs import (
    OUTSIDE_KILL_SCHEDULERS,
    REPO,
    gputui_env,
    is_gone,
    kill_from_outside,
    outside_kill_job,
    proc_tree,
    state_of,
    wait_for,
)

pytestmark = pytest.mark.timeout(300)

HELD_MIB = 2048


def record(env: dict[str, str], *args: str) -> HostSnapshot:
    """One raw sample of the local host, taken by the real collector in a subprocess."""
    done = subprocess.run(
        [sys.executable, "-m", "tests.contract.record", *args],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return HostSnapshot.from_json(done.stdout.strip().splitlines()[-1])


class ReplayLink(HostLink):
    """Answers every sample with the recorded one (or cannot be reached, with ``error``)."""

    def __init__(self, target: str, raw: HostSnapshot | None, error: str | None = None) -> None:
        self.target = target
        self.raw = raw
        self.error = error

    def open(self) -> None:
        if self.error is not None:
            raise LinkError(f"{self.target}: {self.error}")

    def next_snapshot(self, timeout_s: float) -> HostSnapshot | None:
        if self.raw is None:
            raise LinkError(f"{self.target}: not open")
        return self.raw

    def request(self, command: dict[str, Any], timeout_s: float) -> dict[str, Any]:
        if self.raw is None:
            raise LinkError(f"{self.target}: not open")
        if command.get("cmd") == "sample":
            return {"snapshot": self.raw.to_dict()}
        if command.get("cmd") == "health":
            return {"samples": []}
        return {}

    def close(self) -> None:
        pass


@pytest.fixture(scope="module")
def states(
    tmp_path_factory: pytest.TempPathFactory, fake_nvml_lib: Path
) -> Iterator[dict[str, HostSnapshot]]:
    """Every host state of the contract, recorded once from real processes."""
    base = tmp_path_factory.mktemp("contract")
    fake = FakeNvml(lib_dir=fake_nvml_lib, state_path=base / "fakenvml.state")
    fake.write()
    env = gputui_env(fake, base / "state")
    (base / "bin").mkdir()
    scheduler = build_defunct_leader(base / "bin")
    module_dir = install(base / "modules")
    port = free_port()
    url = f"http://127.0.0.1:{port}/health"
    recorded: dict[str, HostSnapshot] = {"clean": record(env, "--no-discover")}
    wedged_pids: dict[str, int] = {}
    with wedged_launcher(module_dir, scheduler, port) as launcher:
        pids = launcher.pids
        wait_for(lambda: state_of(pids["leader"]) == "Z", "the scheduler's leader to be defunct")
        wait_for(lambda: state_of(pids["worker"]) == "D", "its worker thread in D")
        fake.state.add_holder(0, pids["leader"], HELD_MIB, "compute")
        fake.write()
        recorded["wedged"] = record(env)  # discovered: its launcher's pid and age are known
        wedged_pids.update(pids)
    PIDS.update(wedged_pids)
    wait_for(lambda: is_gone(pids["launcher"]) and is_gone(pids["leader"]), "the wedged job to be gone")
    fake.state.holders.clear()
    fake.write()
    recorded["killed"] = record(env, "--no-discover", "--health", url)
    with proc_tree(outside_kill_job()) as tree:
        for gpu, role in enumerate(OUTSIDE_KILL_SCHEDULERS):
            fake.state.add_holder(gpu, tree[role], HELD_MIB, "compute")
        fake.write()
        record(env, "--no-discover")  # the collector sees the job once, and remembers it
        kill_from_outside(tree)
        fake.state.holders.clear()
        fake.write()
        recorded["outside_kill"] = record(env, "--no-discover")
        OUTSIDE.update(tree.pids)
    fake.state.gpus[2].error = "GPU_IS_LOST"
    fake.write()
    recorded["lost_gpu"] = record(env, "--no-discover")
    yield recorded
    PIDS.clear()


PIDS: dict[str, int] = {}
"""The wedged job's pids by role, once recorded."""
OUTSIDE: dict[str, int] = {}
"""The pids by role of the job killed outside gputui, once recorded."""


def _args(command: str, *argv: str) -> Any:
    return build_parser(command).parse_args([*argv, "local"])


def cli_views(
    raw: HostSnapshot | None, monkeypatch: pytest.MonkeyPatch, error: str | None = None
) -> dict[str, Any]:
    """``snapshot`` and ``check``, text and JSON, on the recorded sample."""
    link = ReplayLink("local", raw, error)

    def opener(target: str, options: Any, demo: bool = False) -> HostLink:
        return link

    monkeypatch.setattr(snapshot_command, "open_link", opener)
    monkeypatch.setattr(check_command, "open_link", opener)
    views: dict[str, Any] = {}
    for name, run, argv in (
        ("snapshot", snapshot_command.run_snapshot, ()),
        ("snapshot_json", snapshot_command.run_snapshot, ("--json",)),
        ("check", check_command.run_check, ()),
        ("check_json", check_command.run_check, ("--json",)),
    ):
        out, err = io.StringIO(), io.StringIO()
        status = run(_args(name.split("_")[0], *argv), out, err)
        assert "Traceback" not in err.getvalue()
        views[name] = (status, out.getvalue(), err.getvalue())
    return views


def tui_view(raw: HostSnapshot | None, error: str | None, tmp_path: Path) -> dict[str, str]:
    """The TUI's clean-slate line, findings and health panel, once the replayed sample is shown."""
    clock = ManualClock()
    shown: dict[str, str] = {}

    def factory(target: str) -> HostLink:
        return ReplayLink(target, raw, error)

    async def run() -> None:
        app = GpuTuiApp(
            ["local"],
            factory,
            clock=clock,
            memory_interval_s=0.05,
            process_interval_s=0.05,
            audit_dir=tmp_path / "audit",
        )
        async with app.run_test(size=(160, 50)) as pilot:
            line = app.screen.query_one(CleanSlateLine)
            for _ in range(200):
                await pilot.pause(0.05)
                host = app.hosts[0]
                if (raw is not None and host.snapshot is not None) or (raw is None and host.error):
                    break
            await pilot.pause(0.2)
            shown["verdict"] = str(line.render())
            findings = app.screen.query_one(FindingsList)
            shown["findings"] = "\n".join(
                str(findings.get_option_at_index(i).prompt) for i in range(findings.option_count)
            )
            shown["findings_title"] = str(findings.border_title)
            shown["health"] = str(app.screen.query_one(EndpointPanel).render())

    asyncio.run(run())
    return shown


def _verdict_block(check_text: str) -> list[str]:
    return check_text.rstrip("\n").splitlines()


def assert_views_agree(views: dict[str, Any], tui: dict[str, str]) -> dict[str, Any]:
    """Every view says the same verdict, reasons, findings and server states; returns the JSON host."""
    check_status, check_text, _ = views["check"]
    json_status, check_json, _ = views["check_json"]
    snap_status, snap_text, _ = views["snapshot"]
    _, snap_json, _ = views["snapshot_json"]
    (check_host,) = json.loads(check_json)["hosts"]
    (snap_host,) = json.loads(snap_json)["hosts"]
    verdict = check_host["verdict"]
    # JSON: snapshot's verdict, findings and server states equal check's.
    assert snap_host["verdict"] == verdict
    assert snap_host["findings"] == check_host["findings"]
    assert [(h["url"], h["state"], h["detail"]) for h in snap_host["health"]] == [
        (h["url"], h["state"], h["detail"]) for h in check_host["health"]
    ]
    # Exit code and words agree.
    assert check_status == json_status == EXIT_CODES[verdict["level"]]
    # Text: snapshot prints exactly the lines check prints.
    block = _verdict_block(check_text)
    if snap_text:
        assert snap_text.rstrip("\n").splitlines()[-len(block) :] == block
    parsed = HostSnapshot.from_dict(check_host)
    assert parsed.verdict is not None
    said = headline(parsed.verdict)
    assert said in block
    for finding in check_host["findings"]:
        # The sentence carries no age: the text renders it from the finding's start time, by one function.
        assert "since" in finding
        age = age_since(finding["since"], check_host["time"])
        assert f"! {finding['kind']}: {finding['detail']}" + (f" ({age})" if age else "") in block
    # The TUI: the same headline, the same finding sentences, the same server states.
    assert tui["verdict"].startswith(said), (tui["verdict"], said)
    if verdict["level"] != CANNOT_TELL and verdict["reasons"]:
        assert verdict["reasons"][0] in tui["verdict"]
    # A row per finding, but findings of one kind with one action (eight zombies of one parent) share one.
    for row in group_findings(parsed.findings):
        if row.grouped:
            first = row.findings[0]
            assert f"{len(row.findings)} {first.kind}s under pid {first.action_pid}" in tui["findings"]
        else:
            assert row.findings[0].detail in tui["findings"], (row.findings[0].detail, tui["findings"])
    for sample in check_host["health"]:
        assert sample["state"] in tui["health"]
    if verdict["level"] == CANNOT_TELL:
        assert said.startswith("cannot tell: ")
    return check_host


def test_clean(states: dict[str, HostSnapshot], monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    raw = states["clean"]
    host = assert_views_agree(cli_views(raw, monkeypatch), tui_view(raw, None, tmp_path))
    assert host["verdict"]["level"] == CLEAN, host["verdict"]["reasons"]
    assert not [
        f for f in host["findings"] if f["gpu_index"] is not None
    ]  # the machine's own zombies may show


def test_wedged_launcher_with_defunct_schedulers_and_503(
    states: dict[str, HostSnapshot], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    raw = states["wedged"]
    pids = PIDS
    views = cli_views(raw, monkeypatch)
    host = assert_views_agree(views, tui_view(raw, None, tmp_path))
    verdict = host["verdict"]
    assert verdict["level"] == NOT_CLEAN
    (ours,) = [h for h in host["health"] if h["launcher_pid"] == pids["launcher"]]
    # A young launcher whose job has defunct members is not starting: it is UNHEALTHY, from this sample.
    assert ours["state"] == ENDPOINT_STATE_UNHEALTHY != ENDPOINT_STATE_STARTING
    assert "defunct member" in ours["detail"]
    assert any(r.startswith(f"server {ours['url']} is UNHEALTHY") for r in verdict["reasons"])
    (leader,) = [f for f in host["findings"] if f["kind"] == "defunct_leader"]
    assert leader["pid"] == pids["leader"]
    # The defunct leader is worded once, the finding's way, and never sends anyone to its parent.
    about_leader = [r for r in verdict["reasons"] if r.startswith(f"pid {pids['leader']} ")]
    assert about_leader == [leader["detail"]]
    assert "has not reaped it" not in leader["detail"]
    assert "signalling the parent frees nothing" in leader["action"]


def test_killed_launcher_reads_down_not_starting(
    states: dict[str, HostSnapshot], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    raw = states["killed"]
    host = assert_views_agree(cli_views(raw, monkeypatch), tui_view(raw, None, tmp_path))
    (sample,) = host["health"]
    assert sample["state"] == ENDPOINT_STATE_DOWN
    assert sample["launcher_age_s"] is None
    # Its members left defunct under an init that does not reap them (a container's pid 1 may not) are
    # what is left of it, named with the job; nothing else is.
    job = f"of the job of pid {PIDS['launcher']} "
    left = [f for f in host["findings"] if f["kind"] == "zombie" and job in f["detail"]]
    assert host["verdict"]["reasons"] == [f["detail"] for f in left]
    assert host["verdict"]["level"] == (NOT_CLEAN if left else CLEAN)
    assert all("kill pid 1" not in f["action"] and f["action_pid"] is None for f in left)


def test_a_job_killed_outside_gputui_is_named_alike_in_every_view(
    states: dict[str, HostSnapshot], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    raw = states["outside_kill"]
    host = assert_views_agree(cli_views(raw, monkeypatch), tui_view(raw, None, tmp_path))
    verdict = host["verdict"]
    assert verdict["level"] == NOT_CLEAN
    (survivor,) = [f for f in host["findings"] if f["kind"] == "survivor"]
    assert survivor["pid"] == OUTSIDE["detok"]
    assert f"of the job of pid {OUTSIDE['nsys']} (nsys)" in survivor["detail"]
    assert verdict["facts"]["workers"]["reasons"] == [survivor["detail"]]
    assert verdict["reasons"][0] == survivor["detail"]  # the TUI's line shows it first (checked above)
    zombies = [f for f in host["findings"] if f["kind"] == "zombie"]
    assert {f["pid"] for f in zombies} >= {OUTSIDE[r] for r in OUTSIDE_KILL_SCHEDULERS}
    assert sorted(verdict["facts"]["residue"]["reasons"]) == sorted(f["detail"] for f in zombies)
    check_text = cli_views(raw, monkeypatch)["check"][1].splitlines()
    (workers,) = [line for line in check_text if line.startswith("  workers: ")]
    assert workers.endswith(f" {survivor['detail']}")


def test_lost_gpu_is_not_ready_and_needs_a_reboot(
    states: dict[str, HostSnapshot], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """A GPU the driver says is lost is a known fact whose action is a reboot: NOT READY (exit 1) in every
    view, never "cannot tell"."""
    raw = states["lost_gpu"]
    host = assert_views_agree(cli_views(raw, monkeypatch), tui_view(raw, None, tmp_path))
    assert host["verdict"]["level"] == NOT_READY
    assert host["verdict"]["not_ready"] == ["GPU2 needs a reboot of the host (the driver says it is lost)"]
    status, text = cli_views(raw, monkeypatch)["check"][:2]
    assert status == 1
    assert "GPU2 needs a reboot of the host (the driver says it is lost)" in text


def test_unreachable_host_says_no_data_everywhere(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    views = cli_views(None, monkeypatch, error="connection refused")
    tui = tui_view(None, "connection refused", tmp_path)
    for name in ("check", "check_json", "snapshot", "snapshot_json"):
        assert views[name][0] == 2, name
    (host,) = json.loads(views["check_json"][1])["hosts"]
    (snap_host,) = json.loads(views["snapshot_json"][1])["hosts"]
    assert snap_host["verdict"] == host["verdict"]
    assert host["verdict"]["level"] == CANNOT_TELL
    said = headline(HostSnapshot.from_dict(host).verdict)
    assert said.startswith("cannot tell: no data")
    assert "connection refused" in said
    assert said in views["check"][1]
    assert tui["verdict"].startswith("cannot tell: no data")
    assert "connection refused" in tui["verdict"]
    assert "nothing stuck" not in tui["findings"]
    assert tui["findings"].startswith("no data")
    assert "(0)" not in tui["findings_title"]
    assert tui["health"].startswith("no data")
