"""The options of ``gputui exporter`` (kept apart so that the CLI's grammar loads nothing heavy)."""

from __future__ import annotations

import argparse

DEFAULT_ADDRESS = "127.0.0.1"
DEFAULT_PORT = 10191
"""Prometheus's exporter range 9100-9999 is fully allocated (its default port allocations wiki); exporters
take ports above 10000 since. 10191 is not one of the taken ports known to us."""
DEFAULT_LISTEN = f"{DEFAULT_ADDRESS}:{DEFAULT_PORT}"
DESCRIPTION = """\
Serve this host's GPUs, findings and clean-slate verdict to Prometheus at
/metrics, so that the fleet view and alerts see what only gputui knows, for
every host at once. Read-only: no kill path, nothing but GET is answered. It
serves this host alone: no SSH, no simulated host. On loopback unless told
otherwise; any other address needs TLS (--certfile, --keyfile) or --insecure."""
EPILOG = """\
exit status:
  0  stopped (SIGTERM, SIGINT, SIGHUP), or --once wrote its file
  2  it cannot serve or write: a bad --listen, unusable TLS files, an address
     beyond loopback without TLS, no driver, or a usage error"""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The exporter's description, exit status and own options (the common ones come from the CLI)."""
    parser.description = DESCRIPTION
    parser.epilog = EPILOG
    parser.add_argument(
        "--listen",
        default=DEFAULT_LISTEN,
        metavar="ADDR:PORT",
        help=f"where to serve /metrics (default {DEFAULT_LISTEN}); beyond loopback needs TLS or --insecure",
    )
    parser.add_argument(
        "--once",
        default=None,
        metavar="FILE",
        help="write one sample to FILE (node_exporter's textfile collector: *.prom), atomically, and exit",
    )
    parser.add_argument("--certfile", default=None, metavar="FILE", help="TLS certificate (PEM)")
    parser.add_argument("--keyfile", default=None, metavar="FILE", help="TLS private key (PEM)")
    parser.add_argument(
        "--client-cafile", default=None, metavar="FILE", help="require client certificates signed by this CA"
    )
    parser.add_argument(
        "--hostname",
        default=None,
        metavar="NAME",
        help="the Hostname label of every series (default: this host's name; give dcgm-exporter's where it "
        "differs, e.g. a pod name, so that the fleet view joins the two)",
    )
    parser.add_argument(
        "--insecure",
        action="store_true",
        help="serve plain HTTP beyond loopback (said in the first log line)",
    )
