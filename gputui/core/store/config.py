"""The user's config file: per-host settings that are tedious to type every time.

``$XDG_CONFIG_HOME/gputui/config.toml`` (default ``~/.config/gputui/config.toml``), or the file given with
``--config``::

    # probed on every host
    health = ["http://127.0.0.1:30000/health"]
    metrics = ["http://127.0.0.1:30000/metrics"]   # read beside the health URL of the same origin
    stall_after_s = 30             # requests pending and no token generated this long: STALLED
    spin_after_s = 120             # a job's GPUs busy at idle power, nothing moving, this long: hung
    ssh_client = "auto"            # paramiko, openssh (the system ssh) or auto; unset: see README

    [hosts."gpu-node-07"]
    health = ["http://127.0.0.1:30000/health", "http://127.0.0.1:8000/health"]
    metrics = ["http://127.0.0.1:8000/metrics"]
    stall_after_s = 120            # a slow model: a longer window on this host
    ssh_client = "openssh"         # this host only (--ssh-client overrides both)

    [groups]                       # gputui @a100 opens these hosts
    a100 = ["gpu-a", "gpu-b"]

    [fleet]                        # gputui --prometheus (or plain gputui, with no target named)
    prometheus = "http://prometheus:9090"
    match = 'instance=~"gpu-.*"'   # optional label matchers for the DCGM series
    host_label = "Hostname"        # the label naming a host (else "instance")
    ssh_target = "{host}"          # Enter in the fleet view opens this SSH target
    stale_after_s = 90             # samples older than this are not current data
    refresh_s = 5                  # seconds between queries

Health URLs are probed by the agent on the host itself, so 127.0.0.1 means that host's loopback. A missing
default file is an empty config; a missing ``--config`` file, anything but a regular file (a FIFO, a device
like /dev/zero), a file over ``CONFIG_MAX_BYTES``, bad TOML or an unknown key is a ConfigError whose text is
one line naming the file and the cause. The default file is read through ``safefile`` (owned by you or root,
neither it nor its folders writable by others); a file named with ``--config`` is the user's choice, as
``ssh -F`` takes one, and is only held to being a regular file.
"""

from __future__ import annotations

import os
import stat
import sys

from gputui.core.link import SSH_CLIENTS
from gputui.core.model import Record, field

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

CONFIG_MAX_BYTES = 1024 * 1024
"""The largest config file read (a settings file is a few hundred bytes)."""
HOST_KEYS = frozenset({"health", "metrics", "stall_after_s", "spin_after_s", "ssh_client"})
STALL_AFTER_MIN_S = 1.0
STALL_AFTER_MAX_S = 86400.0
"""The range of ``stall_after_s`` and ``spin_after_s``: under a second is noise between two reads, over a
day is never."""
TOP_KEYS = HOST_KEYS | {"hosts", "groups", "fleet", "accepted_xids", "probe_after_check"}
XID_MAX = 65535
"""The largest number an Xid may be in ``accepted_xids``."""
FLEET_TEXT_KEYS = frozenset({"prometheus", "match", "host_label", "ssh_target"})
FLEET_SECONDS_KEYS = frozenset({"stale_after_s", "refresh_s"})


class ConfigError(Exception):
    """The config file cannot be used; ``str()`` is one line naming the file and the cause."""


class Config(Record):
    """Settings from the config file.

    Attributes:
        health_urls: Probed on every host.
        host_health_urls: Host target -> URLs probed on that host only.
        metrics_urls: Servers' metrics endpoints read on every host.
        host_metrics_urls: Host target -> metrics URLs read on that host only.
        stall_after_s: Seconds of a flat token counter with requests pending before a server is STALLED
            (None: the default).
        host_stall_after_s: Host target -> its own stall window.
        spin_after_s: Seconds a GPU job's GPUs spin at idle power, with nothing moving, before a collective
            is said to be likely hung (None: the default, ``servers.spinning``).
        host_spin_after_s: Host target -> its own spin window.
        path: The file read, or None when there was none.
    """

    health_urls: tuple[str, ...] = ()
    host_health_urls: dict[str, tuple[str, ...]] = field(default_factory=dict)
    metrics_urls: tuple[str, ...] = ()
    host_metrics_urls: dict[str, tuple[str, ...]] = field(default_factory=dict)
    stall_after_s: float | None = None
    host_stall_after_s: dict[str, float] = field(default_factory=dict)
    spin_after_s: float | None = None
    host_spin_after_s: dict[str, float] = field(default_factory=dict)
    path: str | None = None
    groups: dict[str, tuple[str, ...]] = field(default_factory=dict)
    """Group name -> host targets (``gputui @name``)."""
    fleet: dict[str, str | float] = field(default_factory=dict)
    """The ``[fleet]`` settings given: ``FLEET_TEXT_KEYS`` hold text, ``FLEET_SECONDS_KEYS`` seconds."""
    ssh_client: str | None = None
    """The SSH client for every host (``SSH_CLIENTS``), or None when not set."""
    host_ssh_clients: dict[str, str] = field(default_factory=dict)
    """Host target -> the SSH client for that host only."""
    accepted_xids: frozenset[int] = frozenset()
    """Xids this site accepts: shown, never blocking the next launch (``verdict.fitness``)."""
    probe_after_check: bool = False
    """After every clean-slate check that ends clean, the TUI proves the GPUs take work (the probe)."""


def default_config_path() -> str:
    base = os.environ.get("XDG_CONFIG_HOME") or os.path.join(os.path.expanduser("~"), ".config")
    return os.path.join(base, "gputui", "config.toml")


def _urls(value: Any, where: str, path: str, key: str = "health") -> tuple[str, ...]:
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ConfigError(f"{path}: {where}{key} must be a URL or a list of URLs")
    return tuple(value)


def _ssh_client(value: Any, where: str, path: str) -> str:
    if value not in SSH_CLIENTS:
        choices = ", ".join(f'"{name}"' for name in SSH_CLIENTS)
        raise ConfigError(f"{path}: {where}ssh_client must be one of {choices}")
    return str(value)


def _stall_after(value: Any, where: str, path: str, key: str = "stall_after_s") -> float:
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or not STALL_AFTER_MIN_S <= value <= STALL_AFTER_MAX_S
    ):
        raise ConfigError(
            f"{path}: {where}{key} must be a number of seconds from {STALL_AFTER_MIN_S:g} to "
            f"{STALL_AFTER_MAX_S:g}"
        )
    return float(value)


def _check_keys(table: dict[str, Any], allowed: frozenset[str], where: str, path: str) -> None:
    unknown = sorted(set(table) - allowed)
    if unknown:
        known = ", ".join(sorted(allowed))
        raise ConfigError(f"{path}: unknown setting {where}{unknown[0]!r} (known: {known})")


def _read_regular_file(path: str) -> bytes:
    """The bytes of ``path`` if it is a regular file of at most ``CONFIG_MAX_BYTES``, else ConfigError.

    Opened without blocking (a FIFO would wait for a writer) and checked before reading (/dev/zero never
    ends); a file that grows past the limit while read is refused too.
    """
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise ConfigError(f"{path}: not a regular file")
        if info.st_size > CONFIG_MAX_BYTES:
            raise ConfigError(f"{path}: larger than {CONFIG_MAX_BYTES // 1024} KiB")
        from gputui.agent.safefile import read_at_most

        data = read_at_most(fd, CONFIG_MAX_BYTES + 1)
        if len(data) > CONFIG_MAX_BYTES:
            raise ConfigError(f"{path}: larger than {CONFIG_MAX_BYTES // 1024} KiB")
        return data
    finally:
        os.close(fd)


def _read_default_file(path: str) -> bytes:
    """The default config file through ``safefile`` (links followed, then the file and its folders checked
    as OpenSSH checks ``~/.ssh/config``); FileNotFoundError when there is none."""
    from gputui.agent import safefile

    try:
        raw = safefile.read_bytes(path, CONFIG_MAX_BYTES, follow_links=True)
    except safefile.UnsafeFile as exc:
        raise ConfigError(str(exc)) from None
    if raw is None:
        raise FileNotFoundError(path)
    return raw


def load_config(path: str | os.PathLike[str] | None = None) -> Config:
    """Read the config file; ``path`` None means the default location, which may be absent."""
    explicit = path is not None
    path = os.fspath(path) if path is not None else default_config_path()
    try:
        raw = _read_regular_file(path) if explicit else _read_default_file(path)
    except FileNotFoundError:
        if explicit:
            raise ConfigError(f"{path}: no such config file") from None
        return Config()
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read: {exc.strerror or exc}") from None
    # The TOML parser is loaded only for a file that exists: most runs have none.
    if sys.version_info >= (3, 11):
        import tomllib
    else:  # pragma: no cover - exercised on 3.10 only
        import tomli as tomllib
    try:
        data = tomllib.loads(raw.decode("utf-8"))
    except UnicodeDecodeError:
        raise ConfigError(f"{path}: not UTF-8 text") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: not valid TOML: {exc}") from None
    _check_keys(data, TOP_KEYS, "", path)
    hosts = data.get("hosts", {})
    if not isinstance(hosts, dict):
        raise ConfigError(f'{path}: hosts must be a table of [hosts."NAME"] sections')
    host_health: dict[str, tuple[str, ...]] = {}
    host_clients: dict[str, str] = {}
    host_metrics: dict[str, tuple[str, ...]] = {}
    host_stall: dict[str, float] = {}
    host_spin: dict[str, float] = {}
    for name, table in hosts.items():
        if not isinstance(table, dict):
            raise ConfigError(f"{path}: hosts.{name!r} must be a table")
        where = f"hosts.{name!r}."
        _check_keys(table, HOST_KEYS, where, path)
        if "health" in table:
            host_health[name] = _urls(table["health"], where, path)
        if "metrics" in table:
            host_metrics[name] = _urls(table["metrics"], where, path, "metrics")
        if "stall_after_s" in table:
            host_stall[name] = _stall_after(table["stall_after_s"], where, path)
        if "spin_after_s" in table:
            host_spin[name] = _stall_after(table["spin_after_s"], where, path, "spin_after_s")
        if "ssh_client" in table:
            host_clients[name] = _ssh_client(table["ssh_client"], where, path)
    return Config(
        health_urls=_urls(data["health"], "", path) if "health" in data else (),
        host_health_urls=host_health,
        metrics_urls=_urls(data["metrics"], "", path, "metrics") if "metrics" in data else (),
        host_metrics_urls=host_metrics,
        stall_after_s=_stall_after(data["stall_after_s"], "", path) if "stall_after_s" in data else None,
        host_stall_after_s=host_stall,
        spin_after_s=(
            _stall_after(data["spin_after_s"], "", path, "spin_after_s") if "spin_after_s" in data else None
        ),
        host_spin_after_s=host_spin,
        path=path,
        groups=_groups(data.get("groups", {}), path),
        fleet=_fleet(data.get("fleet", {}), path),
        ssh_client=_ssh_client(data["ssh_client"], "", path) if "ssh_client" in data else None,
        host_ssh_clients=host_clients,
        accepted_xids=_xids(data["accepted_xids"], path) if "accepted_xids" in data else frozenset(),
        probe_after_check=_flag(data.get("probe_after_check", False), "probe_after_check", path),
    )


def _flag(value: Any, name: str, path: str) -> bool:
    if not isinstance(value, bool):
        raise ConfigError(f"{path}: {name} must be true or false")
    return value


def _xids(value: Any, path: str) -> frozenset[int]:
    if not isinstance(value, list) or not all(
        isinstance(x, int) and not isinstance(x, bool) and 0 < x <= XID_MAX for x in value
    ):
        raise ConfigError(f"{path}: accepted_xids must be a list of Xid numbers (1 to {XID_MAX})")
    return frozenset(value)


def _groups(table: Any, path: str) -> dict[str, tuple[str, ...]]:
    if not isinstance(table, dict):
        raise ConfigError(f'{path}: groups must be a table of name = ["host", ...]')
    groups: dict[str, tuple[str, ...]] = {}
    for name, members in table.items():
        if not isinstance(members, list) or not all(isinstance(m, str) and m for m in members):
            raise ConfigError(f"{path}: groups.{name!r} must be a list of host targets")
        groups[name] = tuple(members)
    return groups


def _fleet(table: Any, path: str) -> dict[str, str | float]:
    if not isinstance(table, dict):
        raise ConfigError(f"{path}: fleet must be a table ([fleet])")
    _check_keys(table, FLEET_TEXT_KEYS | FLEET_SECONDS_KEYS, "fleet.", path)
    fleet: dict[str, str | float] = {}
    for key, value in table.items():
        if key in FLEET_TEXT_KEYS:
            if not isinstance(value, str):
                raise ConfigError(f"{path}: fleet.{key} must be a string")
            fleet[key] = value
        elif isinstance(value, bool) or not isinstance(value, int | float) or not 0 < value < 1e6:
            raise ConfigError(f"{path}: fleet.{key} must be a number of seconds above 0")
        else:
            fleet[key] = float(value)
    return fleet
