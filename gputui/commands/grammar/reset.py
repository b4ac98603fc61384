"""The argument grammar of ``gputui reset`` and ``gputui leftovers`` (kept out of the shared ``cli``)."""

from __future__ import annotations

import argparse

RESET_DESCRIPTION = """\
Can nvidia-smi -r reset these GPUs now? Without --yes: print the plan (every
process holding /dev/nvidia*, /dev/nvidiactl or /dev/nvidia-uvm with pid, user,
command and device; persistence and MIG modes; an attached display; the NVSwitch
baseboard rule) and the steps in order, or "a reset cannot work here: reboot"
with the reason. With --yes: audit every step, have the host's collector step
aside (close its NVML handles), run the steps with bounded time, restore
persistence mode and the stopped services in every outcome, and verify. Nothing
is ever signalled: kill a blocking process with gputui kill first."""
RESET_EPILOG = """\
exit status without --yes:
  0  the reset can go ahead
  1  something blocks it (or only a reboot can help)
  2  cannot tell, or a usage error
exit status with --yes:
  0  done and verified clean after
  1  blocked, a step failed, or not clean after
  2  cannot tell (host unreachable, no answer, read-only mode, no audit log, bad
     usage)"""
LEFTOVERS_DESCRIPTION = """\
What killed jobs left behind on a host: /dev/shm segments and semaphores they had
open or mapped, unfinished profiler reports, MPS control daemons that outlived
them. --remove unlinks the segments and raw profiler streams no process has open
or mapped, each checked to be the job's own file right before, confirmed and
written to the audit log first; an MPS daemon is only named, with the command
that stops it."""
LEFTOVERS_EPILOG = """\
exit status:
  0  nothing left
  1  something left, or not removed
  2  cannot tell (host unreachable, no answer, read-only mode with --remove), or a
     usage error"""


def add_reset_arguments(parser: argparse.ArgumentParser) -> None:
    """``gputui reset``: its description, exit status and own options."""
    parser.description = RESET_DESCRIPTION
    parser.epilog = RESET_EPILOG
    parser.add_argument("--all", action="store_true", help="every GPU of the host")
    parser.add_argument("--yes", action="store_true", help="run the plan (after writing it to the audit log)")
    parser.add_argument("--json", action="store_true", help="print the plan or the outcome as JSON")
    parser.add_argument(
        "words",
        nargs="*",
        metavar="HOST GPU",
        help="the host (local for this machine), then GPU indexes or UUIDs",
    )


def add_leftovers_arguments(parser: argparse.ArgumentParser) -> None:
    """``gputui leftovers``: its description, exit status and own options."""
    parser.description = LEFTOVERS_DESCRIPTION
    parser.epilog = LEFTOVERS_EPILOG
    parser.add_argument("--remove", action="store_true", help="remove the segments (confirmed, audited)")
    parser.add_argument("--yes", action="store_true", help="with --remove: do not ask")
    parser.add_argument("--json", action="store_true", help="print JSON")
    parser.add_argument(
        "targets", nargs="*", metavar="TARGET", help="the host (local, an ssh alias, [user@]host[:port])"
    )
