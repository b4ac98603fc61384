"""Command-line options for many hosts: ``@group`` targets, ``--hosts-file``, and the Prometheus fleet.

``add_arguments`` puts the options on a parser; ``resolve`` runs once the config file is loaded, replaces
``@group`` words and the hosts file's lines in ``args.targets``, and sets ``args.fleet`` to a ``FleetChoice``
when the fleet is read from Prometheus (None otherwise). Every mistake is a ``FleetOptionError`` whose text is
one line.
"""

from __future__ import annotations

import argparse
import os
import stat

from gputui.core.model import Record
from gputui.core.store import Config
from gputui.core.text import visible

TYPE_CHECKING = False
if TYPE_CHECKING:
    from gputui.transports.prometheus import FleetSettings

GROUP_PREFIX = "@"
FROM_CONFIG = ""
"""``--prometheus`` given without a URL: the config's ``[fleet] prometheus``."""
HOSTS_FILE_MAX_BYTES = 1 << 20


class FleetOptionError(Exception):
    """A bad group, hosts file or fleet option; ``str()`` is one line."""


class FleetChoice(Record):
    """The fleet to read and how.

    Attributes:
        settings: What the Prometheus source needs.
        ssh_target: Template of the SSH target a host opens as (``{host}`` is replaced).
        refresh_s: Seconds between queries.
    """

    settings: FleetSettings
    ssh_target: str
    refresh_s: float


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """``--prometheus``, ``--match`` and ``--hosts-file``."""
    parser.add_argument(
        "--prometheus",
        nargs="?",
        const=FROM_CONFIG,
        default=None,
        metavar="URL",
        help="read every GPU host from Prometheus (DCGM exporter metrics; no URL: [fleet] prometheus)",
    )
    parser.add_argument(
        "--match",
        default=None,
        metavar="MATCHERS",
        help="with --prometheus: only the DCGM series these matchers select, e.g. 'instance=~\"gpu-.*\"'",
    )
    parser.add_argument(
        "--hosts-file",
        default=None,
        metavar="FILE",
        help="more targets, one per line (# comments)",
    )


def _config_name(config: Config) -> str:
    return str(config.path) if config.path is not None else "the config file"


def _group(name: str, config: Config) -> list[str]:
    members = config.groups.get(name)
    if members is None:
        known = ", ".join(sorted(config.groups)) or "none defined"
        raise FleetOptionError(
            f"no group {visible(name, 60)!r} in {_config_name(config)} ([groups]: {known})"
        )
    for member in members:
        if member.startswith(GROUP_PREFIX):
            raise FleetOptionError(
                f"{_config_name(config)}: groups.{name!r} lists {visible(member, 60)!r}: "
                "members are host targets, not groups"
            )
    return list(members)


def read_hosts_file(path: str) -> list[str]:
    """The targets of a hosts file: one per line; blank lines and ``#`` comments are skipped.

    Raises:
        FleetOptionError: the file cannot be read, is not a regular text file, or a line is not one word.
    """
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError as exc:
        raise FleetOptionError(f"--hosts-file {path}: cannot open: {exc.strerror or exc}") from None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise FleetOptionError(f"--hosts-file {path}: not a regular file")
        raw = os.read(fd, HOSTS_FILE_MAX_BYTES + 1)
    except OSError as exc:
        raise FleetOptionError(f"--hosts-file {path}: cannot read: {exc.strerror or exc}") from None
    finally:
        os.close(fd)
    if len(raw) > HOSTS_FILE_MAX_BYTES:
        raise FleetOptionError(f"--hosts-file {path}: larger than {HOSTS_FILE_MAX_BYTES >> 20} MiB")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise FleetOptionError(f"--hosts-file {path}: not UTF-8 text") from None
    if "\x00" in text:
        raise FleetOptionError(f"--hosts-file {path}: not a text file (NUL bytes)")
    targets: list[str] = []
    for number, line in enumerate(text.splitlines(), 1):
        word = line.split("#", 1)[0].strip()
        if not word:
            continue
        if len(word.split()) != 1:
            raise FleetOptionError(
                f"--hosts-file {path}:{number}: one target per line, not {visible(word, 80)!r}"
            )
        targets.append(word)
    if not targets:
        raise FleetOptionError(f"--hosts-file {path}: no targets in it")
    return targets


def expand_targets(words: list[str], hosts_file: str | None, config: Config) -> list[str]:
    """``words`` with every ``@group`` replaced by its members, then the hosts file's targets.

    A host that a group or the file repeats is kept once (where it came first); a target typed twice stays
    twice, for the caller to refuse as before.
    """
    out: list[str] = []
    seen: set[str] = set()

    def add(members: list[str]) -> None:
        for member in members:
            if member not in seen:
                seen.add(member)
                out.append(member)

    for word in words:
        if word.startswith(GROUP_PREFIX):
            add(_group(word[len(GROUP_PREFIX) :], config))
        else:
            seen.add(word)
            out.append(word)
    if hosts_file is not None:
        file_targets = read_hosts_file(hosts_file)
        expanded: list[str] = []
        for word in file_targets:
            is_group = word.startswith(GROUP_PREFIX)
            expanded.extend(_group(word[len(GROUP_PREFIX) :], config) if is_group else [word])
        add(expanded)
    return out


def _fleet_choice(args: argparse.Namespace, config: Config) -> FleetChoice:
    # Imported here: every other command line starts without the Prometheus client and the analysis.
    from gputui.core.fleet import DEFAULT_REFRESH_S, DEFAULT_SSH_TARGET, check_template
    from gputui.transports.prometheus import (
        DEFAULT_HOST_LABEL,
        DEFAULT_STALE_AFTER_S,
        FleetSettings,
        normalise_url,
        parse_matcher,
    )

    fleet = config.fleet
    url = args.prometheus or str(fleet.get("prometheus") or "")
    if not url:
        raise FleetOptionError(
            f"--prometheus: no URL given and no [fleet] prometheus in {_config_name(config)}"
        )
    match_text = args.match if args.match is not None else str(fleet.get("match") or "")
    try:
        settings = FleetSettings(
            url=normalise_url(url),
            matcher=parse_matcher(match_text),
            host_label=str(fleet.get("host_label") or DEFAULT_HOST_LABEL),
            stale_after_s=float(fleet.get("stale_after_s") or DEFAULT_STALE_AFTER_S),
            timeout_s=float(args.connect_timeout),
        )
        template = check_template(str(fleet.get("ssh_target") or DEFAULT_SSH_TARGET))
    except ValueError as exc:
        where = "" if args.prometheus or args.match else f"{_config_name(config)}: "
        raise FleetOptionError(f"{where}{exc}") from None
    return FleetChoice(settings, template, float(fleet.get("refresh_s") or DEFAULT_REFRESH_S))


def resolve(args: argparse.Namespace, command: str | None) -> None:
    """Expand the targets and choose the fleet (``args.fleet``) for ``command`` (None: the TUI).

    The TUI reads the fleet when ``--prometheus`` is given, or when no target is named and the config has
    ``[fleet] prometheus``; ``snapshot`` and ``check`` only with ``--prometheus`` (a script on a GPU host
    keeps checking that host whatever the config says).

    Raises:
        FleetOptionError: one line.
    """
    config: Config = args.config if isinstance(args.config, Config) else Config()
    args.targets = expand_targets(list(args.targets), args.hosts_file, config)
    wants_fleet = args.prometheus is not None
    if command is None and not args.targets and not args.demo and config.fleet.get("prometheus"):
        wants_fleet = True
    if not wants_fleet:
        args.fleet = None
        if args.match is not None:
            raise FleetOptionError("--match selects DCGM series: it needs --prometheus")
        return
    if args.targets:
        raise FleetOptionError(
            "--prometheus reads every host from Prometheus: name no targets (Enter in the list opens a host)"
        )
    if args.demo:
        raise FleetOptionError("--demo simulates hosts: it cannot be combined with --prometheus")
    if getattr(args, "calibrate", False):
        raise FleetOptionError("--calibrate records one idle host over SSH: name it instead of --prometheus")
    args.fleet = _fleet_choice(args, config)
