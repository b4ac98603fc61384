"""From a target word on the command line to a live link: local, simulated, or SSH.

An SSH link goes through paramiko or the system ssh client as ``--ssh-client`` or the config's ``ssh_client``
say (``gputui.transports.ssh.client_choice`` has the rule). Where neither says, the TUI and the exporter use
``config`` (the system ssh where a host's ssh config needs it, paramiko with its host-key question elsewhere)
and a one-shot command ``auto``: it rides the user's running ControlMaster (no login, no handshake), and
without one the system client's key exchange costs less CPU than importing paramiko and making its
handshake.
"""

from __future__ import annotations

import argparse

from gputui.core.link import HostLink, LinkOptions
from gputui.core.store import Config

LOCAL_TARGET = "local"
ONE_SHOT_SSH_CLIENT = "auto"
"""The SSH client of a one-shot command that chose none (see the module's docstring)."""
TUI_SSH_CLIENT = "config"
"""The SSH client of the TUI and the exporter when none was chosen: per host, the system ssh where its ssh
config needs it (``gputui.transports.ssh.client_choice``), so they reach every host a one-shot reaches."""
DEMO_TARGETS = ("gpu-node-07", "gpu-node-08", "gpu-node-09")
"""Simulated hosts of ``--demo``: the first replays the wedged sglang story, the second stays healthy, the
third is a shared host with one finding of each other kind."""


def options_from_args(args: argparse.Namespace, one_shot: bool = False) -> LinkOptions:
    """LinkOptions from the common command-line flags and the config file loaded into ``args.config``.

    ``one_shot``: the command samples once and exits (its client is ``auto`` unless one was chosen).
    """
    config: Config = getattr(args, "config", None) or Config()
    ssh_client = getattr(args, "ssh_client", None)  # the flag beats the config's global and per-host values
    return LinkOptions(
        memory_interval_s=args.interval,
        process_interval_s=args.process_interval,
        read_only=args.read_only,
        accept_new=args.accept_new,
        health_urls=tuple(dict.fromkeys([*config.health_urls, *args.health])),
        host_health_urls=dict(config.host_health_urls),
        metrics_urls=tuple(dict.fromkeys([*config.metrics_urls, *getattr(args, "metrics", [])])),
        host_metrics_urls=dict(config.host_metrics_urls),
        discover_health=not args.no_discover,
        health_generate=args.health_generate,
        connect_timeout_s=args.connect_timeout,
        extra={"ssh_config": args.ssh_config} if getattr(args, "ssh_config", None) else {},
        ssh_client=ssh_client or config.ssh_client or (ONE_SHOT_SSH_CLIENT if one_shot else TUI_SSH_CLIENT),
        host_ssh_clients={} if ssh_client else dict(config.host_ssh_clients),
    )


def default_targets(targets: list[str], demo: bool) -> list[str]:
    """The targets to use when the user named none."""
    if targets:
        return list(targets)
    return list(DEMO_TARGETS[:1]) if demo else [LOCAL_TARGET]


def open_link(target: str, options: LinkOptions, demo: bool = False) -> HostLink:
    """A (not yet opened) link for one target, with the options configured for it."""
    options = options.for_target(target)
    if demo:
        from gputui.transports.sim import SimLink

        return SimLink(target, options, gpu_fault=True)
    if target == LOCAL_TARGET:
        from gputui.transports.local import LocalLink

        return LocalLink(options)
    from gputui.transports.ssh import SshLink

    return SshLink(target, options)
