"""The idle baselines a command judges a host against (a flag, the calibrated figures, or the default), and
the config's other settings for judging: the Xids a site accepts, the server watch's windows."""

from __future__ import annotations

from gputui.core.store import load_baselines
from gputui.core.text import visible
from gputui.core.verdict import DEFAULT_BASELINE_MIB, DEFAULT_TOLERANCE_MIB, Baselines

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import TextIO

    from gputui.core.servers import ServerWatch


def resolve_baselines(
    target: str,
    baseline_mib: int | None,
    tolerance_mib: int | None,
    demo: bool,
    err: TextIO,
    accepted_xids: frozenset[int] = frozenset(),
) -> Baselines:
    """The baselines for one target: ``--baseline-mib`` if given, else the calibrated values, else 3 MiB; and
    the Xids the site accepts (the config's ``accepted_xids``).

    A calibration file that cannot be used gives one warning line on ``err`` and the defaults.
    """
    tolerance = DEFAULT_TOLERANCE_MIB if tolerance_mib is None else tolerance_mib
    if baseline_mib is not None:
        return Baselines(default_mib=baseline_mib, tolerance_mib=tolerance, accepted_xids=accepted_xids)
    if demo:  # simulated hosts have nothing recorded about them
        return Baselines(tolerance_mib=tolerance, accepted_xids=accepted_xids)
    loaded = load_baselines(target)
    if loaded.warning:
        print(f"gputui: warning: {visible(loaded.warning, 400)}", file=err)
    return Baselines(
        default_mib=DEFAULT_BASELINE_MIB,
        tolerance_mib=tolerance,
        per_gpu_mib=loaded.per_gpu_mib,
        accepted_xids=accepted_xids,
    )


def accepted_xids(args: object) -> frozenset[int]:
    """The config's ``accepted_xids`` (none without a config)."""
    config = getattr(args, "config", None)
    return getattr(config, "accepted_xids", frozenset())


def server_watch(args: object) -> ServerWatch:
    """A server watch with the config's stall and spin windows (a command without a config: the defaults):
    what judges a host over several samples (stalls, a spinning collective), as the TUI keeps one."""
    from gputui.core.servers import ServerWatch
    from gputui.core.store import Config

    config = getattr(args, "config", None)
    if not isinstance(config, Config):
        return ServerWatch()
    return ServerWatch(
        config.stall_after_s, config.host_stall_after_s, config.spin_after_s, config.host_spin_after_s
    )
