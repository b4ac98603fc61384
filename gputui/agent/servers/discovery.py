"""Finding health endpoints: the /health URLs that sglang and vLLM launchers in the process list serve, and
whether a URL is this host's own (discovery probes nothing else)."""

from __future__ import annotations

import os
import re

from gputui.agent.servers import ENDPOINT_MAX_URLS

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Iterable

ENDPOINT_SGLANG_DEFAULT_PORT = 30000
ENDPOINT_VLLM_DEFAULT_PORT = 8000
_HOSTNAME_RE = re.compile(r"^[A-Za-z0-9](?:[A-Za-z0-9.-]{0,251}[A-Za-z0-9])?$")


def _health_valid_port(text: str) -> int | None:
    if not text.isdigit() or len(text) > 5:
        return None
    port = int(text)
    return port if 1 <= port <= 65535 else None


def _health_url_host(host: str | None) -> str | None:
    """The host part of a discovered URL for a launcher's ``--host`` value; None when it is not usable."""
    if host is None or host == "" or host == "localhost":
        return "127.0.0.1"
    import ipaddress  # only once a launcher is found: most hosts run none

    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return host if _HOSTNAME_RE.match(host) else None
    if address.is_unspecified:
        return "127.0.0.1"  # bound to every address: the loopback one answers
    return f"[{address.compressed}]" if address.version == 6 else address.compressed


def _health_option(argv: list[str], name: str) -> tuple[bool, str | None]:
    """The last value of ``--name V`` / ``--name=V`` in argv (argparse semantics) and whether it was given."""
    found = False
    value: str | None = None
    index = 0
    while index < len(argv):
        arg = argv[index]
        if arg == "--":
            break
        if arg == name:
            found = True
            value = argv[index + 1] if index + 1 < len(argv) else ""
            index += 2
            continue
        if arg.startswith(name + "="):
            found = True
            value = arg[len(name) + 1 :]
        index += 1
    return found, value


def _health_entry_point(argv: list[str]) -> tuple[str, str, str]:
    """What a command line runs: (kind, name, first argument after it), kind "module", "script" or "program".

    For a Python interpreter the interpreter's own options are skipped, so ``python -u -m pkg.mod`` runs the
    module ``pkg.mod`` and ``python /venv/bin/vllm serve`` the script ``/venv/bin/vllm``; ``python -c`` runs
    nothing recognisable (so ``python -c ... -m sglang.launch_server`` is not a launcher, and neither is
    ``pgrep -f sglang.launch_server``).
    """
    if not argv:
        return "program", "", ""
    if not os.path.basename(argv[0]).startswith("python"):
        return "program", argv[0], argv[1] if len(argv) > 1 else ""
    index = 1
    while index < len(argv):
        arg = argv[index]
        if arg == "-m":
            following = argv[index + 2] if index + 2 < len(argv) else ""
            return "module", argv[index + 1] if index + 1 < len(argv) else "", following
        if arg.startswith("-m") and len(arg) > 2 and not arg.startswith("--"):
            return "module", arg[2:], argv[index + 1] if index + 1 < len(argv) else ""
        if arg.startswith("-c") or arg == "-":
            return "code", "", ""
        if arg in ("-W", "-X", "--check-hash-based-pycs"):
            index += 2
            continue
        if arg.startswith("-"):
            index += 1
            continue
        return "script", arg, argv[index + 1] if index + 1 < len(argv) else ""
    return "program", argv[0], ""


def _health_launcher_kind(argv: list[str]) -> str | None:
    kind, name, following = _health_entry_point(argv)
    base = os.path.basename(name)
    if kind == "module":
        if name == "sglang.launch_server":
            return "sglang"
        if name == "vllm.entrypoints.openai.api_server":
            return "vllm"
        return None
    if kind == "script" and name.replace(os.sep, "/").endswith("sglang/launch_server.py"):
        return "sglang"
    if kind == "script" and name.replace(os.sep, "/").endswith("vllm/entrypoints/openai/api_server.py"):
        return "vllm"
    if kind in ("script", "program") and following == "serve":
        if base == "sglang":
            return "sglang"
        if base == "vllm":
            return "vllm"
    return None


def port_option(cmdline: Iterable[Any]) -> int | None:
    """The port a command line names with ``--port N`` / ``--port=N`` (the last one, as argparse reads it);
    None when it names none or not a valid one."""
    given, text = _health_option([str(arg) for arg in cmdline], "--port")
    return _health_valid_port(text or "") if given else None


def health_launcher_url(cmdline: Iterable[Any]) -> str | None:
    """The /health URL an sglang or vLLM launcher command line serves, or None.

    Recognises ``python -m sglang.launch_server``, ``sglang serve``, ``vllm serve`` and
    ``python -m vllm.entrypoints.openai.api_server``; reads ``--port N`` / ``--port=N`` (defaults 30000 and
    8000) and ``--host`` (unset, 0.0.0.0, :: and localhost become 127.0.0.1). A launcher whose port or host is
    not valid yields nothing rather than a guess.
    """
    endpoints = health_launcher_endpoints(cmdline)
    return None if endpoints is None else endpoints[0]


def health_launcher_endpoints(cmdline: Iterable[Any]) -> tuple[str, str | None] | None:
    """The /health and /metrics URLs a launcher serves (:func:`health_launcher_url` for the first); the
    metrics URL is None for an sglang launcher without ``--enable-metrics`` (vLLM serves it always)."""
    argv = [str(arg) for arg in cmdline]
    if len(argv) == 1 and " " in argv[0]:
        argv = argv[0].split()  # a process that rewrote its title into one string
    kind = _health_launcher_kind(argv)
    if kind is None:
        return None
    port_given, port_text = _health_option(argv, "--port")
    if port_given:
        port = _health_valid_port(port_text or "")
        if port is None:
            return None
    else:
        port = ENDPOINT_SGLANG_DEFAULT_PORT if kind == "sglang" else ENDPOINT_VLLM_DEFAULT_PORT
    _host_given, host_text = _health_option(argv, "--host")
    host = _health_url_host(host_text)
    if host is None:
        return None
    metrics = kind == "vllm" or _health_option(argv, "--enable-metrics")[0]
    origin = f"http://{host}:{port}"
    return f"{origin}/health", f"{origin}/metrics" if metrics else None


LAUNCHER_NAME_PREFIXES = ("python", "pt_main_thread")
"""Process names (the stat's comm) of Python interpreters: ``python3 -m sglang.launch_server``, a
``python3 /venv/bin/vllm serve`` script, and a torch process whose main thread renamed it."""
LAUNCHER_NAME_WORDS = ("sglang", "vllm")
"""Names of the launchers' own scripts (``/venv/bin/sglang serve``) and of titles they set."""


def health_launcher_like_name(name: str) -> bool:
    """Whether a process of this name (the stat's comm, at most 15 bytes) may be a launcher, so that its
    command line is worth reading: discovery reads no other process's."""
    lowered = name.lower()
    return lowered.startswith(LAUNCHER_NAME_PREFIXES) or any(word in lowered for word in LAUNCHER_NAME_WORDS)


def discover_health_urls(processes: Iterable[Any]) -> list[str]:
    """Health URLs proposed by the inference-server launchers among ``processes``.

    Args:
        processes: Dicts with a "cmdline" argv list (other keys ignored), or objects with a ``cmdline``.

    Returns:
        Distinct URLs in a stable (sorted) order, at most ``ENDPOINT_MAX_URLS``.
    """
    return [launcher[0] for launcher in discover_launchers(processes)]


def discover_launchers(processes: Iterable[Any]) -> list[tuple[str, str | None, int | None]]:
    """``(health URL, metrics URL or None, launcher pid or None)`` of each launcher among ``processes``, by
    health URL (sorted, at most ``ENDPOINT_MAX_URLS``); of two launchers of one URL, the lower pid."""
    found: dict[str, tuple[str, str | None, int | None]] = {}
    for process in processes:
        get = process.get if isinstance(process, dict) else lambda key, p=process: getattr(p, key, None)
        cmdline = get("cmdline")
        if not cmdline or isinstance(cmdline, (str, bytes)):
            continue
        endpoints = health_launcher_endpoints(cmdline)
        if endpoints is None:
            continue
        pid = get("pid")
        pid = pid if isinstance(pid, int) and not isinstance(pid, bool) else None
        known = found.get(endpoints[0])
        if known is None or (pid is not None and (known[2] is None or pid < known[2])):
            found[endpoints[0]] = (endpoints[0], endpoints[1], pid)
    return [found[url] for url in sorted(found)[:ENDPOINT_MAX_URLS]]


def health_read_proc_cmdlines(proc_root: str = "/proc") -> list[dict[str, Any]]:
    """Every process's ``{"pid", "cmdline"}`` from /proc, for discovery when no full process list is at hand.

    Processes that vanish or cannot be read are skipped; zombies and kernel threads have an empty cmdline.
    """
    result: list[dict[str, Any]] = []
    try:
        names = os.listdir(proc_root)
    except OSError:
        return result
    for name in names:
        if not name.isdigit():
            continue
        try:
            with open(os.path.join(proc_root, name, "cmdline"), "rb") as handle:
                raw = handle.read(65536)
        except OSError:
            continue
        argv = [part.decode("utf-8", "replace") for part in raw.split(b"\0")]
        if argv and argv[-1] == "":
            argv.pop()
        if argv:
            result.append({"pid": int(name), "cmdline": argv})
    return result


def health_local_addresses(proc_net: str = "/proc/net") -> set[str]:
    """This host's own IP addresses (in the collector's network namespace), from /proc; no lookup, no socket.

    IPv4 from the kernel's routing trie (``/32 host LOCAL`` entries of ``fib_trie``), IPv6 from ``if_inet6``.
    """
    import ipaddress

    found: set[str] = set()
    try:
        with open(os.path.join(proc_net, "fib_trie")) as handle:
            last: str | None = None
            for line in handle:
                words = line.split()
                if len(words) >= 2 and words[0] in ("|--", "+--"):
                    last = words[1].split("/", 1)[0]
                elif last is not None and words[-2:] == ["host", "LOCAL"]:
                    found.add(last)
    except OSError:
        pass
    try:
        with open(os.path.join(proc_net, "if_inet6")) as handle:
            for line in handle:
                words = line.split()
                if words and len(words[0]) == 32:
                    try:
                        found.add(ipaddress.ip_address(bytes.fromhex(words[0])).compressed)
                    except ValueError:
                        pass
    except OSError:
        pass
    return found


def health_is_local_url(url: str, local_addresses: set[str], hostname: str | None = None) -> bool:
    """Whether ``url`` points at this host: a loopback address, one of ``local_addresses``, ``localhost`` or
    this host's own name. Decided without any name lookup."""
    from urllib.parse import urlsplit  # only once something was found: most hosts run no launcher

    try:
        host = urlsplit(url).hostname or ""
    except ValueError:
        return False
    import ipaddress

    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        names = {"localhost"}
        if hostname:
            names.update((hostname.lower(), hostname.split(".", 1)[0].lower()))
        return host.lower() in names
    mapped = getattr(address, "ipv4_mapped", None)
    if mapped is not None:
        address = mapped
    return address.is_loopback or address.compressed in local_addresses
