"""From a target word to the SSH settings OpenSSH would use for it.

A target is an alias from ``~/.ssh/config`` or ``[user@]host[:port]`` (also ``[v6addr]:port`` and a bare IPv6
address). When the OpenSSH client is installed the settings come from ``ssh -G`` itself, so ``Include``,
``Match``, ``ProxyJump``, ``IdentityFile``, ``Port``, ``User`` and ``HostName`` resolve as ``ssh`` would.
Without it, paramiko's ``SSHConfig`` parses the files, and this module closes its gaps: it expands ``Include``
(globs; relative paths are relative to ``~/.ssh`` for user files and ``/etc/ssh`` for the system file) before
parsing, and fills in OpenSSH's defaults for port, user, identity files and known_hosts files.

Environment:
    GPUTUI_SSH_CONFIG: A config file used instead of ``~/.ssh/config`` and the system file (like ``ssh -F``).
    GPUTUI_SSH_RESOLVER: ``paramiko`` forces the fallback parser even when ``ssh`` is installed.

Known differences of the fallback: an ``Include`` inside a ``Host`` block is inlined, so lines after it in the
same block belong to the included file's last block (OpenSSH returns to the enclosing block); ``~`` is
``$HOME`` (OpenSSH uses the passwd entry's home directory, ``ssh -G`` too, so tests pass absolute paths).
"""

from __future__ import annotations

import os
import re
import stat
import subprocess

from gputui.agent.safefile import UnsafeFile, read_plain
from gputui.core.link import LinkError, TargetSpec, parse_target
from gputui.core.model import Record

TYPE_CHECKING = False
if TYPE_CHECKING:
    from pathlib import Path

CONFIG_ENV = "GPUTUI_SSH_CONFIG"
RESOLVER_ENV = "GPUTUI_SSH_RESOLVER"
SYSTEM_CONFIG = "/etc/ssh/ssh_config"
SSH_G_TIMEOUT_S = 10.0
MAX_INCLUDE_DEPTH = 16
CONFIG_MAX_BYTES = 4 << 20
"""The largest ssh config file read."""
IDENTITY_MAX_BYTES = 1 << 20
"""The largest identity (key) file, or its ``.pub``, read: a key is a few KiB."""
KNOWN_HOSTS_MAX_BYTES = 32 << 20
"""The largest known-hosts file read (hundreds of thousands of hosts); a larger one is refused."""
DEFAULT_PORT = 22
# OpenSSH 9.x's default identity files, in the order ssh -G lists them.
DEFAULT_IDENTITY_FILES = (
    "~/.ssh/id_rsa",
    "~/.ssh/id_ecdsa",
    "~/.ssh/id_ecdsa_sk",
    "~/.ssh/id_ed25519",
    "~/.ssh/id_ed25519_sk",
    "~/.ssh/id_xmss",
    "~/.ssh/id_dsa",
)
DEFAULT_USER_KNOWN_HOSTS = ("~/.ssh/known_hosts", "~/.ssh/known_hosts2")
DEFAULT_GLOBAL_KNOWN_HOSTS = ("/etc/ssh/ssh_known_hosts", "/etc/ssh/ssh_known_hosts2")


class SshSettings(Record):
    """What OpenSSH would use to reach one target.

    Attributes:
        target: The word the user gave.
        hostname: The address to connect to (after ``HostName``).
        port: TCP port.
        user: Login user.
        identity_files: Private key paths, ``~`` expanded, in trial order.
        identities_only: Use only ``identity_files`` (no other agent keys).
        proxy_jump: Jump hosts in connection order (empty: direct).
        proxy_command: A ProxyCommand, if configured (not supported by the SSH transport).
        user_known_hosts_files / global_known_hosts_files: known_hosts files, ``~`` expanded.
        host_key_alias: ``HostKeyAlias``, if any.
        hash_known_hosts: ``HashKnownHosts``: write accepted keys with hashed names.
        connect_timeout_s: ``ConnectTimeout`` in seconds, or None.
        server_alive_interval_s: ``ServerAliveInterval`` in seconds, or None when off.
        identity_agent: ``IdentityAgent`` (``SSH_AUTH_SOCK``, ``none`` or a socket path), or None.
        strict_host_key_checking: ``StrictHostKeyChecking`` lower-cased (``ask`` when unset; ``yes`` and
            ``ask`` both refuse unknown keys here, as nothing can be asked on a worker thread).
        certificate_files: ``CertificateFile`` paths, ``~`` expanded (used by the OpenSSH client only).
        gssapi_authentication: ``GSSAPIAuthentication yes`` (Kerberos; the OpenSSH client only).
        control_path: ``ControlPath`` as ``ssh -G`` expands it, or None when unset or ``none``.
        resolver: ``ssh -G`` or ``paramiko``.
    """

    target: str
    hostname: str
    port: int
    user: str
    identity_files: tuple[str, ...] = ()
    identities_only: bool = False
    proxy_jump: tuple[str, ...] = ()
    proxy_command: str | None = None
    user_known_hosts_files: tuple[str, ...] = ()
    global_known_hosts_files: tuple[str, ...] = ()
    host_key_alias: str | None = None
    hash_known_hosts: bool = False
    connect_timeout_s: float | None = None
    server_alive_interval_s: float | None = None
    identity_agent: str | None = None
    strict_host_key_checking: str = "ask"
    certificate_files: tuple[str, ...] = ()
    gssapi_authentication: bool = False
    control_path: str | None = None
    resolver: str = "ssh -G"

    @property
    def accepts_new_host_keys(self) -> bool:
        """``StrictHostKeyChecking accept-new`` (or ``no``): record unknown host keys; changed ones never."""
        return self.strict_host_key_checking in ("accept-new", "no", "off")

    def step_timeout_s(self, link_timeout_s: float) -> float:
        """The deadline of each connecting step: the link's, or ``ConnectTimeout`` when that is shorter."""
        timeout_s = link_timeout_s
        if self.connect_timeout_s:
            timeout_s = min(timeout_s, self.connect_timeout_s)
        return max(0.1, timeout_s)

    def openssh_only(self) -> tuple[str, ...]:
        """What this configuration asks for that only the OpenSSH client carries out, one phrase each.

        GSSAPIAuthentication counts only on a machine set up for Kerberos: Debian and Ubuntu turn it on for
        every host in /etc/ssh/ssh_config, where it does nothing without a ticket. A ControlPath counts when
        its socket exists: a master the user started, which only the system ssh can share.
        """
        needs: list[str] = []
        if self.proxy_command:
            needs.append("ProxyCommand")
        if self.certificate_files:
            needs.append("CertificateFile")
        if self.gssapi_authentication and kerberos_configured():
            needs.append("GSSAPIAuthentication")
        if self.control_path and _is_socket(self.control_path):
            needs.append("a running ControlMaster")
        return tuple(needs)


KERBEROS_CONFIG = "/etc/krb5.conf"


def kerberos_configured() -> bool:
    """Whether this machine has a Kerberos setup GSSAPI could use (a credential cache or a krb5.conf)."""
    if os.environ.get("KRB5CCNAME") or os.environ.get("KRB5_CONFIG"):
        return True
    return os.path.exists(KERBEROS_CONFIG)


def _is_socket(path: str) -> bool:
    try:
        return stat.S_ISSOCK(os.stat(path).st_mode)
    except (OSError, ValueError):
        return False


def config_file(config_path: str | None) -> str | None:
    """The ssh config file used instead of the defaults (``ssh -F``): ``config_path``, else
    ``$GPUTUI_SSH_CONFIG``; None for the defaults."""
    return config_path or os.environ.get(CONFIG_ENV) or None


def target_words(spec: TargetSpec) -> list[str]:
    """``ssh`` arguments naming the target of ``spec``: ``-p PORT``, ``-l USER``, ``--``, the host word.

    Every part was validated by ``parse_target``; ``--`` keeps the host word from ever being an option.
    """
    words: list[str] = []
    if spec.port is not None:
        words += ["-p", str(spec.port)]
    if spec.user is not None:
        words += ["-l", spec.user]
    return [*words, "--", spec.host]


def find_ssh() -> str | None:
    """The ``ssh`` that ``PATH`` names first (an executable file), as ``shutil.which`` finds it; None: none.

    Looked up here: shutil would load its archive modules (bz2, lzma and their libraries) into every
    one-shot for this one lookup.
    """
    for folder in os.environ.get("PATH", os.defpath).split(os.pathsep):
        path = os.path.join(folder or os.curdir, "ssh")
        if os.access(path, os.X_OK) and not os.path.isdir(path):
            return path
    return None


def openssh_available() -> bool:
    """Whether ``ssh -G`` will be used (an ``ssh`` on PATH and no ``GPUTUI_SSH_RESOLVER=paramiko``)."""
    return os.environ.get(RESOLVER_ENV, "").lower() != "paramiko" and find_ssh() is not None


def _login_name() -> str:
    """The user name OpenSSH logs in as by default (``getpass.getuser``)."""
    import getpass  # a config that names no user: rare with ``ssh -G``, which always says one

    return getpass.getuser()


def _expand(path: str) -> str:
    return os.path.expanduser(path)


def _split_words(values: list[str]) -> tuple[str, ...]:
    words: list[str] = []
    for value in values:
        words.extend(value.split())
    return tuple(words)


def _yes(value: str | None) -> bool:
    return (value or "").strip().lower() in ("yes", "true")


def _seconds(value: str | None) -> float | None:
    if value is None or value.strip().lower() in ("", "none", "0"):
        return None
    try:
        seconds = float(value)
    except ValueError:
        return None
    return seconds if seconds > 0 else None


def _paths(values: list[str]) -> tuple[str, ...]:
    return tuple(_expand(p) for p in values if p.lower() != "none")


def _hops(value: str | None) -> tuple[str, ...]:
    if value is None or value.strip().lower() in ("", "none"):
        return ()
    return tuple(hop.strip() for hop in value.split(",") if hop.strip())


def _opt(value: str | None) -> str | None:
    if value is None or value.strip().lower() in ("", "none"):
        return None
    return value.strip()


def _settings_from_options(
    target: str, options: dict[str, list[str]], resolver: str, spec: TargetSpec
) -> SshSettings:
    def first(key: str) -> str | None:
        values = options.get(key)
        return values[0] if values else None

    port_text = first("port")
    try:
        port = int(port_text) if port_text else (spec.port or DEFAULT_PORT)
    except ValueError:
        raise LinkError(f"{target}: bad Port {port_text!r} in ssh config") from None
    identity_files = options.get("identityfile") or list(DEFAULT_IDENTITY_FILES)
    return SshSettings(
        target=target,
        hostname=first("hostname") or spec.host,
        port=port,
        user=first("user") or spec.user or _login_name(),
        identity_files=_paths(identity_files),
        identities_only=_yes(first("identitiesonly")),
        proxy_jump=_hops(first("proxyjump")),
        proxy_command=_opt(first("proxycommand")),
        user_known_hosts_files=tuple(
            _expand(p)
            for p in _split_words(options.get("userknownhostsfile") or list(DEFAULT_USER_KNOWN_HOSTS))
        ),
        global_known_hosts_files=tuple(
            _expand(p)
            for p in _split_words(options.get("globalknownhostsfile") or list(DEFAULT_GLOBAL_KNOWN_HOSTS))
        ),
        host_key_alias=_opt(first("hostkeyalias")),
        hash_known_hosts=_yes(first("hashknownhosts")),
        connect_timeout_s=_seconds(first("connecttimeout")),
        server_alive_interval_s=_seconds(first("serveraliveinterval")),
        identity_agent=_opt(first("identityagent")),
        strict_host_key_checking=(first("stricthostkeychecking") or "ask").strip().lower(),
        certificate_files=_paths(options.get("certificatefile", [])),
        gssapi_authentication=_yes(first("gssapiauthentication")),
        control_path=_opt(first("controlpath")),
        resolver=resolver,
    )


def resolve_with_openssh(target: str, spec: TargetSpec, config_path: str | None) -> SshSettings:
    """Ask ``ssh -G`` (no shell; the host word was validated by ``parse_target``)."""
    ssh = find_ssh()
    if ssh is None:
        raise LinkError(f"{target}: the OpenSSH client (ssh) is not installed")
    argv = [ssh, "-G"]
    if config_path:
        argv += ["-F", config_path]
    argv += target_words(spec)
    try:
        done = subprocess.run(  # noqa: S603 - fixed argv, validated host word
            argv, capture_output=True, timeout=SSH_G_TIMEOUT_S, stdin=subprocess.DEVNULL, check=False
        )
    except subprocess.TimeoutExpired:
        raise LinkError(f"{target}: 'ssh -G' took longer than {SSH_G_TIMEOUT_S:.0f} s") from None
    except OSError as exc:
        raise LinkError(f"{target}: cannot run ssh -G: {exc.strerror or exc}") from None
    if done.returncode != 0:
        why = done.stderr.decode("utf-8", "replace").strip().splitlines()
        raise LinkError(f"{target}: ssh -G failed: {why[-1] if why else f'exit {done.returncode}'}")
    options: dict[str, list[str]] = {}
    for line in done.stdout.decode("utf-8", "replace").splitlines():
        key, _, value = line.partition(" ")
        if key:
            options.setdefault(key.lower(), []).append(value.strip())
    return _settings_from_options(target, options, "ssh -G", spec)


_INCLUDE_RE = re.compile(r"^\s*include(?:\s*=\s*|\s+)(.*)$", re.IGNORECASE)


def expand_includes(path: Path, base_dir: Path, depth: int = 0) -> str:
    """The text of a config file with every ``Include`` replaced by the files it names (sorted glob order).

    Args:
        path: The config file.
        base_dir: Where relative Include paths point (``~/.ssh`` for user files, ``/etc/ssh`` for system
            ones).
    """
    if depth > MAX_INCLUDE_DEPTH:
        raise LinkError(f"ssh config: Include nested deeper than {MAX_INCLUDE_DEPTH} at {path}")
    try:
        data = read_plain(path, CONFIG_MAX_BYTES)
    except UnsafeFile as exc:
        raise LinkError(f"ssh config: {exc}") from None
    if data is None:
        return ""
    text = data.decode("utf-8", "replace")
    out: list[str] = []
    for line in text.splitlines():
        match = _INCLUDE_RE.match(line)
        if not match:
            out.append(line)
            continue
        for pattern in match.group(1).split():
            pattern = _expand(pattern.strip('"'))
            if not os.path.isabs(pattern):
                pattern = str(base_dir / pattern)
            import glob  # Include lines only: the fallback parser's

            for included in sorted(glob.glob(pattern)):
                if os.path.isfile(included):
                    out.append(expand_includes(type(path)(included), base_dir, depth + 1))
    return "\n".join(out)


_MATCH_EXEC_RE = re.compile(r"^[ \t]*match\b[^\n]*\bexec\b", re.IGNORECASE | re.MULTILINE)
"""A ``Match exec`` line: paramiko runs it through invoke."""


def resolve_with_paramiko(target: str, spec: TargetSpec, config_path: str | None) -> SshSettings:
    """Resolve with paramiko's parser after expanding Includes (OpenSSH file order: user, then system)."""
    from pathlib import Path  # the fallback parser's: a host resolved by ssh -G reads no file here

    from gputui.transports.ssh.noinvoke import give_paramiko_invoke, import_paramiko

    paramiko = import_paramiko()
    user_dir = Path(_expand("~/.ssh"))
    if config_path:
        text = expand_includes(Path(config_path), user_dir)
    else:
        text = (
            expand_includes(user_dir / "config", user_dir)
            + "\n"
            + expand_includes(Path(SYSTEM_CONFIG), Path(SYSTEM_CONFIG).parent)
        )
    if _MATCH_EXEC_RE.search(text):
        give_paramiko_invoke(paramiko.config)
    try:
        parsed = paramiko.SSHConfig.from_text(text)
        found = parsed.lookup(spec.host)
    except Exception as exc:  # paramiko raises assorted errors on bad lines and Match exec failures
        raise LinkError(f"{target}: cannot parse ssh config: {exc}") from None
    options: dict[str, list[str]] = {}
    for key, value in found.items():
        values = value if isinstance(value, list) else [str(value)]
        options[key.lower()] = [str(v) for v in values]
    # Command-line -p / -l beat the config, as with ssh.
    if spec.port is not None:
        options["port"] = [str(spec.port)]
    if spec.user is not None:
        options["user"] = [spec.user]
    if "hostname" in options:
        options["hostname"] = [options["hostname"][0]]
    return _settings_from_options(target, options, "paramiko", spec)


def resolve(target: str, config_path: str | None = None, use_openssh: bool | None = None) -> SshSettings:
    """The settings for one target word.

    Args:
        target: The word the user gave (validated here).
        config_path: A config file to use instead of the defaults (``ssh -F``); defaults to
            ``$GPUTUI_SSH_CONFIG``.
        use_openssh: Force (True) or avoid (False) ``ssh -G``; default: use it when installed.

    Raises:
        LinkError: A bad target (``BadTarget``) or config, one line.
    """
    spec = parse_target(target)
    config_path = config_file(config_path)
    if use_openssh is None:
        use_openssh = openssh_available()
    if use_openssh:
        return resolve_with_openssh(target, spec, config_path)
    return resolve_with_paramiko(target, spec, config_path)
