"""``gputui exporter``: this host's collector behind a Prometheus ``/metrics`` endpoint, or one textfile.

The collector samples on a thread of its own (memory every ``--interval``, processes every
``--process-interval``); each sample is analysed (findings, clean-slate verdict) and its servers judged with
one ``ServerWatch`` kept for the whole run, so STALLED is seen. A scrape only reads the newest analysed
sample (``ExporterCollector.collect``): a device that hangs delays the next sample, never a scrape, and the
scrape says how old its sample is (``gputui_sample_age_seconds``).

The exporter has no kill path at all: its collector is read-only, and nothing it serves takes a command
(prometheus_client's app answers GET and OPTIONS only). Listening beyond loopback needs TLS
(``--certfile``/``--keyfile``, prometheus_client's own options) or ``--insecure``, said in the first log
line. Logs go to stderr (foreground: systemd, a container).
"""

from __future__ import annotations

import argparse
import ipaddress
import logging
import os
import signal
import socket
import sys
import threading
import time
from collections.abc import Iterable
from pathlib import Path

from prometheus_client import CollectorRegistry, ProcessCollector, generate_latest, start_http_server
from prometheus_client.metrics_core import Metric

from gputui import __version__
from gputui.commands.grammar.exporter import DEFAULT_ADDRESS
from gputui.commands.inputs.baselines import accepted_xids, resolve_baselines, server_watch
from gputui.commands.inputs.targets import open_link, options_from_args
from gputui.core.fleet import ExportedSample, ExporterFigures, families
from gputui.core.link import HostLink, LinkError, one_shot_sample
from gputui.core.model import replace
from gputui.core.servers import ServerWatch
from gputui.core.store import StoreError, atomic_write_text
from gputui.core.text import fit, visible
from gputui.core.verdict import Baselines, judge
from gputui.transports.local import LOCAL_TARGET

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

EXIT_OK = 0
EXIT_ERROR = 2
SAMPLE_WAIT_S = 5.0
"""How long one wait for the next sample lasts (the loop checks for a stop between waits)."""
RETRY_AFTER_ERROR_S = 5.0

log = logging.getLogger("gputui.exporter")


IDLE_TIMEOUT_S = 10.0
"""How long a connection may stay silent in a read or a write before it is closed."""
MAX_CONNECTIONS = 64
"""Connections served at once; more are closed at accept."""
TLS_FILE_MAX_BYTES = 1 << 20
"""The largest certificate, key or CA file read (a bundle of CAs is some hundred KiB)."""


class ListenError(ValueError):
    """A ``--listen`` or TLS setting that cannot be used; ``str()`` is one line."""


def parse_listen(text: str) -> tuple[str, int]:
    """``ADDR:PORT``, ``[V6]:PORT`` or ``:PORT`` (the default address) as (address, port).

    Raises:
        ListenError: not an IP address and a port from 1 to 65535.
    """
    body = text.strip()
    if body.startswith("["):
        address, _, port_text = body[1:].partition("]:")
    else:
        address, _, port_text = body.rpartition(":")
    address = address or DEFAULT_ADDRESS
    if address == "localhost":
        address = DEFAULT_ADDRESS
    try:
        ipaddress.ip_address(address)
    except ValueError:
        raise ListenError(
            f"--listen: not an IP address: {visible(address, 80)!r} (write ADDR:PORT)"
        ) from None
    if not port_text.isdigit() or not 0 < int(port_text) < 65536:
        raise ListenError(
            f"--listen: not a port from 1 to 65535: {visible(port_text, 20)!r} (write ADDR:PORT)"
        )
    return address, int(port_text)


def is_loopback(address: str) -> bool:
    return ipaddress.ip_address(address).is_loopback


def _can_read_kernel_log() -> bool:
    try:
        fd = os.open("/dev/kmsg", os.O_RDONLY | os.O_NONBLOCK)
    except OSError:
        return False
    os.close(fd)
    return True


class Sampler:
    """Takes samples from the local collector on a daemon thread and keeps the newest, analysed.

    Args:
        link: A link to this host's collector, opened read-only.
        baselines: What the verdict judges memory against.
        interval_s: Seconds from the start of one sample to the next (the link's memory interval): the
            sampler waits itself, so that a sample's duration and CPU time are its own, not the wait's.
    """

    def __init__(
        self, link: HostLink, baselines: Baselines, interval_s: float = 1.0, watch: ServerWatch | None = None
    ) -> None:
        self.link = link
        self.baselines = baselines
        self.interval_s = interval_s
        self.watch = watch or ServerWatch()
        self._lock = threading.Lock()
        self._latest: ExportedSample | None = None
        self._cpu_s = 0.0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.last_error: str | None = None

    @property
    def latest(self) -> ExportedSample | None:
        with self._lock:
            return self._latest

    @property
    def cpu_seconds(self) -> float:
        with self._lock:
            return self._cpu_s

    def take(self, snapshot: Any, started: float, cpu_started: float) -> ExportedSample:
        """Judge and keep one snapshot (its servers, findings and verdict), as every view judges one: with the
        watch's findings over samples (a spinning collective) and the verdict's reasons."""
        judged = judge(snapshot, self.baselines, servers=self.watch)
        finished = time.time()
        sample = ExportedSample(judged, self.baselines, finished, max(0.0, time.monotonic() - started))
        with self._lock:
            self._latest = sample
            self._cpu_s += max(0.0, time.process_time() - cpu_started)
        return sample

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="gputui-exporter-sampler", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()

    def _run(self) -> None:
        due = time.monotonic()
        while not self._stop.wait(max(0.0, due - time.monotonic())):
            started, cpu_started = time.monotonic(), time.process_time()
            due = started + self.interval_s
            try:
                snapshot = self.link.next_snapshot(SAMPLE_WAIT_S)
            except LinkError as exc:
                if self._stop.is_set():
                    return  # the link closed under it on the way out
                self._note_error(str(exc))
                self._stop.wait(RETRY_AFTER_ERROR_S)
                continue
            except Exception as exc:  # noqa: BLE001 - the exporter keeps serving its last sample
                self._note_error(f"{type(exc).__name__}: {exc}")
                self._stop.wait(RETRY_AFTER_ERROR_S)
                continue
            if snapshot is None:
                continue
            sample = self.take(snapshot, started, cpu_started)
            error = sample.snapshot.error
            if error != self.last_error:
                if error:
                    log.warning("host error: %s", visible(error, 300))
                elif self.last_error:
                    log.info("host readable again")
                self.last_error = error

    def _note_error(self, error: str) -> None:
        if error != self.last_error:
            log.warning("collector: %s", visible(error, 300))
            self.last_error = error


class ExporterCollector:
    """prometheus_client's custom-collector interface over the sampler's newest sample."""

    def __init__(
        self, sampler: Sampler, hostname: str, figures: ExporterFigures, fixed_hostname: bool = False
    ) -> None:
        self.sampler = sampler
        self.hostname = hostname
        self.fixed_hostname = fixed_hostname
        self.figures = figures
        self._lock = threading.Lock()
        self._last_scrape_s: float | None = None
        self._scrapes = 0

    def collect(self) -> Iterable[Metric]:
        started = time.monotonic()
        sample = self.sampler.latest
        with self._lock:
            figures = ExporterFigures(
                cpu_seconds=self.sampler.cpu_seconds,
                last_scrape_s=self._last_scrape_s,
                scrapes=self._scrapes,
                can_read_other_users=self.figures.can_read_other_users,
                can_read_kernel_log=self.figures.can_read_kernel_log,
            )
        hostname = self.hostname
        if sample is not None and sample.snapshot.hostname and not self.fixed_hostname:
            hostname = fit(sample.snapshot.hostname, 64)
        out = families(sample, time.time(), figures, hostname, __version__)
        with self._lock:
            self._scrapes += 1
            self._last_scrape_s = time.monotonic() - started
        return out


def registry_for(collector: ExporterCollector) -> CollectorRegistry:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(collector)
    ProcessCollector(registry=registry)
    return registry


def _collector(args: argparse.Namespace, sampler: Sampler) -> ExporterCollector:
    if args.hostname:
        return ExporterCollector(sampler, visible(args.hostname, 64), _figures(), fixed_hostname=True)
    return ExporterCollector(sampler, visible(socket.gethostname(), 64), _figures())


def _figures() -> ExporterFigures:
    return ExporterFigures(can_read_other_users=os.geteuid() == 0, can_read_kernel_log=_can_read_kernel_log())


def _link(args: argparse.Namespace) -> HostLink:
    options = replace(options_from_args(args), read_only=True)  # no kill path, whatever was asked
    demo = bool(getattr(args, "demo", False))
    from gputui.commands.inputs.targets import default_targets

    target = default_targets([], demo)[0] if demo else LOCAL_TARGET
    return open_link(target, options, demo=demo)


def _baselines(args: argparse.Namespace, target: str) -> Baselines:
    return resolve_baselines(
        target, args.baseline_mib, args.tolerance_mib, bool(args.demo), sys.stderr, accepted_xids(args)
    )


def run_once(args: argparse.Namespace) -> int:
    """``--once FILE``: one full sample written to FILE in the exposition format, atomically."""
    path = Path(args.once)
    if path.suffix != ".prom":
        print(
            f"gputui: warning: {visible(str(path), 200)}: node_exporter reads only *.prom files",
            file=sys.stderr,
        )
    link = _link(args)
    try:
        link.open()
        started, cpu_started = time.monotonic(), time.process_time()
        snapshot = one_shot_sample(link, link.target)
        sampler = Sampler(link, _baselines(args, link.target), watch=server_watch(args))
        sampler.take(snapshot, started, cpu_started)
    except LinkError as exc:
        print(f"gputui: exporter: {visible(str(exc), 300)}", file=sys.stderr)
        return EXIT_ERROR
    finally:
        link.close()
    collector = _collector(args, sampler)
    text = generate_latest(registry_for(collector)).decode("utf-8")
    try:
        atomic_write_text(path, text)
    except StoreError as exc:
        print(f"gputui: exporter: {visible(str(exc), 300)}", file=sys.stderr)
        return EXIT_ERROR
    return EXIT_OK


def _bound_connections(server: Any) -> None:
    """prometheus_client's server keeps a thread per connection with no deadline: a silent or trickling
    client holds one for ever, and thousands grow thousands of threads. Each connection now gets
    ``IDLE_TIMEOUT_S`` per read and write, and past ``MAX_CONNECTIONS`` at once a new one is closed at
    accept; a scrape answers in milliseconds, so Prometheus never meets either."""
    handler = server.RequestHandlerClass
    server.RequestHandlerClass = type("BoundedHandler", (handler,), {"timeout": IDLE_TIMEOUT_S})
    slots = threading.BoundedSemaphore(MAX_CONNECTIONS)
    serve_one = server.process_request_thread

    def process_request(request: Any, client_address: Any) -> None:
        if not slots.acquire(blocking=False):
            server.shutdown_request(request)
            return

        def run() -> None:
            try:
                serve_one(request, client_address)
            finally:
                slots.release()

        threading.Thread(target=run, name="gputui-exporter-connection", daemon=True).start()

    server.process_request = process_request


def _tls(args: argparse.Namespace) -> dict[str, Any]:
    certfile, keyfile = args.certfile, args.keyfile
    if bool(certfile) != bool(keyfile):
        raise ListenError("--certfile and --keyfile go together")
    if args.client_cafile and not certfile:
        raise ListenError("--client-cafile needs --certfile and --keyfile")
    if not certfile:
        return {}
    from gputui.agent.safefile import UnsafeFile, read_bytes

    for option, path in (
        ("--certfile", certfile),
        ("--keyfile", keyfile),
        ("--client-cafile", args.client_cafile),
    ):
        if not path:
            continue
        # Checked as gputui's own state files are (the TLS library would block for ever opening a FIFO, and
        # take a key anyone may read or replace), the key kept from others' eyes too. Links are followed to
        # the file they name and that file is checked: a Kubernetes secret is mounted through links.
        try:
            found = read_bytes(path, TLS_FILE_MAX_BYTES, follow_links=True, private=option == "--keyfile")
        except UnsafeFile as exc:
            raise ListenError(f"{option}: {exc}") from None
        if found is None:
            raise ListenError(f"{option}: {path}: no such file")
    return {
        "certfile": certfile,
        "keyfile": keyfile,
        "client_cafile": args.client_cafile,
        "client_auth_required": bool(args.client_cafile),
    }


def run_exporter(args: argparse.Namespace) -> int:
    """Serve ``/metrics`` until SIGTERM, SIGINT or SIGHUP; ``--once`` writes one textfile instead."""
    logging.basicConfig(
        stream=sys.stderr, level=logging.INFO, format="%(asctime)s gputui exporter %(levelname)s: %(message)s"
    )
    if args.once is not None:
        return run_once(args)
    try:
        address, port = parse_listen(args.listen)
        tls = _tls(args)
        if not is_loopback(address) and not tls and not args.insecure:
            raise ListenError(
                f"--listen {address}: beyond loopback the exporter tells anyone who can reach it who runs "
                "what: give --certfile and --keyfile, or --insecure"
            )
    except ListenError as exc:
        print(f"gputui: {exc}", file=sys.stderr)
        return EXIT_ERROR
    scheme = "https" if tls else "http"
    if not is_loopback(address) and not tls:
        log.warning(
            "insecure: plain HTTP on %s:%d beyond loopback (--insecure): no TLS, no client check",
            address,
            port,
        )
    link = _link(args)
    try:
        link.open()
    except LinkError as exc:
        print(f"gputui: exporter: {visible(str(exc), 300)}", file=sys.stderr)
        return EXIT_ERROR
    sampler = Sampler(link, _baselines(args, link.target), args.interval, server_watch(args))
    collector = _collector(args, sampler)
    try:
        server, _thread = start_http_server(port, address, registry=registry_for(collector), **tls)
        _bound_connections(server)
    except (OSError, ValueError) as exc:
        link.close()
        cause = getattr(exc, "strerror", None) or str(exc)
        print(
            f"gputui: exporter: cannot listen on {address}:{port}: {visible(cause, 200)}",
            file=sys.stderr,
        )
        return EXIT_ERROR
    stop = threading.Event()

    def end(signum: int, _frame: object) -> None:
        log.info("stopping (%s)", signal.Signals(signum).name)
        stop.set()

    for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(signum, end)
    sampler.start()
    log.info(
        "serving %s://%s:%d/metrics (read-only: no kill path; %s)",
        scheme,
        address if ":" not in address else f"[{address}]",
        server.server_address[1],
        "root: every check" if os.geteuid() == 0 else "not root: other users' open files cannot be read",
    )
    try:
        while not stop.wait(1.0):
            pass
    finally:
        sampler.stop()
        server.shutdown()
        server.server_close()
        link.close()
    return EXIT_OK
