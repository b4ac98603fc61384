"""``gputui`` with no subcommand: the Textual app over the named targets (local by default)."""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
from collections.abc import Callable, Iterator

from gputui.commands.inputs.baselines import accepted_xids, server_watch
from gputui.commands.inputs.targets import DEMO_TARGETS, LOCAL_TARGET, open_link, options_from_args
from gputui.core.link import HostLink
from gputui.core.text import visible

TYPE_CHECKING = False
if TYPE_CHECKING:
    from gputui.ui.app import GpuTuiApp

EXIT_ERROR = 2
DEMO_WEDGE_AFTER_S = 6.0
"""In the demo the first host serves for this long before its schedulers wedge, as in the story."""


def _targets(args: argparse.Namespace) -> list[str]:
    """The hosts to open: those named, else local (both demo hosts with --demo); none for the fleet view,
    which opens hosts as the user picks them."""
    if getattr(args, "fleet", None) is not None:
        return []
    return list(args.targets) or (list(DEMO_TARGETS) if args.demo else [LOCAL_TARGET])


def run_tui(args: argparse.Namespace) -> int:
    """Open the app; returns the exit status."""
    targets = _targets(args)
    if len(set(targets)) != len(targets):
        print("gputui: a target is named twice", file=sys.stderr)
        return EXIT_ERROR
    if not theme_known(getattr(args, "theme", None)):
        return EXIT_ERROR
    size_for_a_sizeless_terminal()
    return run_app(build_app(args))


def theme_known(theme: str | None) -> bool:
    """Whether ``--theme`` names a theme (none named: yes); one line on stderr when it does not."""
    if theme is None:
        return True
    from gputui.ui.theme import theme_names

    if theme in theme_names():
        return True
    print(
        f"gputui: unknown theme {visible(theme, 40)!r} (one of: {', '.join(theme_names())})", file=sys.stderr
    )
    return False


def size_for_a_sizeless_terminal() -> None:
    """A terminal that reports no size (a pty opened without one: some harnesses and ``ssh`` setups) reads
    as 0×0 to one part of the stack and 80×24 to another, and the screen is then redrawn without end: give it
    80×24 through the variables every part reads first, unless the user set them. Before the app is built:
    its console reads them then."""
    stdout = sys.__stdout__
    if stdout is None:
        return
    try:
        size = os.get_terminal_size(stdout.fileno())
    except (OSError, ValueError):
        return
    if size.columns == 0 or size.lines == 0:
        os.environ.setdefault("COLUMNS", "80")
        os.environ.setdefault("LINES", "24")


def run_app(app: GpuTuiApp) -> int:
    """Run a built app until it quits; returns its exit status. Its terminal gone, SIGTERM or SIGHUP: out
    within 2 s (``TerminalWatch``)."""
    from gputui.ui.terminal_watch import TerminalWatch

    watch = TerminalWatch(app)
    watch.install()
    try:
        result = app.run()
    finally:
        watch.stop()
    if watch.signum is not None:
        watch.end_process()
    return 0 if result is None else int(result)


@contextlib.contextmanager
def _asyncio_without_tls() -> Iterator[None]:
    """Import Textual (and with it asyncio) without the ``ssl`` module asyncio loads for TLS transports.

    asyncio imports ``ssl`` at its own import, and ``ssl`` maps libssl and libcrypto: about 4 MiB of the
    TUI's resident memory, for TLS connections the event loop never makes here (probes and Prometheus
    queries use blocking sockets on threads, and import ``ssl`` themselves when a URL is https). Marking
    ``ssl`` absent while asyncio imports leaves asyncio without TLS transports; once the imports are done
    ``ssl`` imports as usual, so an https probe later in the run still gets it.
    """
    if "asyncio" in sys.modules or "ssl" in sys.modules:
        yield
        return
    sys.modules["ssl"] = None  # type: ignore[assignment]  # "import ssl" raises ImportError meanwhile
    try:
        yield
    finally:
        if "ssl" in sys.modules and sys.modules["ssl"] is None:
            del sys.modules["ssl"]


def build_app(args: argparse.Namespace, clock: Callable[[], float] | None = None) -> GpuTuiApp:
    """The app for these command-line arguments (targets default to local, or both demo hosts with --demo).

    Args:
        args: Parsed by ``gputui.commands.grammar.parser.build_parser(None)``.
        clock: Epoch seconds source for the app and the demo hosts (screenshots freeze it); default: now.
    """
    from gputui.core.store import Config, load_baselines
    from gputui.core.verdict import Baselines

    with _asyncio_without_tls():
        from gputui.ui.app import GpuTuiApp
    from gputui.ui.theme import ThemeStore
    from gputui.ui.theme import resolve as resolve_theme

    targets = _targets(args)
    options = options_from_args(args)

    def link_factory(target: str) -> HostLink:
        if args.demo:
            from gputui.transports.sim import SimLink

            return SimLink(target, options, clock=clock, wedged_at_s=DEMO_WEDGE_AFTER_S, gpu_fault=True)
        return open_link(target, options)

    def baselines_for(target: str) -> Baselines:
        kwargs: dict[str, object] = {"accepted_xids": accepted_xids(args)}
        if not args.demo:
            loaded = load_baselines(target)
            if loaded.warning:
                print(f"gputui: {loaded.warning}", file=sys.stderr)
            kwargs["per_gpu_mib"] = loaded.per_gpu_mib
        if args.baseline_mib is not None:
            kwargs["default_mib"] = args.baseline_mib
        if args.tolerance_mib is not None:
            kwargs["tolerance_mib"] = args.tolerance_mib
        return Baselines(**kwargs)  # type: ignore[arg-type]

    def accept_host_key(hop: str, key: object) -> object:
        from gputui.transports.ssh import accept_host_key as record

        # The same ssh config the links resolve targets with (-F), so the key lands in its known_hosts.
        return record(hop, key, config_path=getattr(args, "ssh_config", None))

    fleet = None
    if getattr(args, "fleet", None) is not None:
        from gputui.commands.fleet_report import build_fleet_screen

        fleet = build_fleet_screen(args, clock)
    theme = getattr(args, "theme", None)
    config: Config = getattr(args, "config", None) or Config()
    return GpuTuiApp(
        targets,
        link_factory,
        baselines_for,
        read_only=args.read_only,
        clock=clock,
        memory_interval_s=args.interval,
        process_interval_s=args.process_interval,
        accept_host_key=accept_host_key,
        # The demo's kills are simulated: they never go into the real audit log.
        audit=not args.demo and not getattr(args, "no_audit", False),
        fleet=fleet,
        theme=None if theme is None else resolve_theme(theme),
        # Screenshots (a frozen clock) neither read nor change the user's choice.
        theme_store=ThemeStore() if clock is None else None,
        servers=server_watch(args),
        probe_after_check=config.probe_after_check,
        record=getattr(args, "record", None),
    )
