"""Record one raw host sample as ``gputui snapshot`` takes it, before any judging: ``python -m
tests.contract.record [snapshot options] [TARGET]`` prints the collector's sample as one JSON line.

The contract test runs it in a subprocess (the fake NVML is loaded there, the agent runs in it as the local
link runs it) against real processes, then renders the recorded sample in-process in every view.
"""

from __future__ import annotations

import sys

from gputui.commands.grammar.parser import build_parser
from gputui.commands.snapshot import take_snapshot


def main(argv: list[str]) -> int:
    args = build_parser("snapshot").parse_args(argv)
    targets = list(args.targets) or ["local"]
    print(take_snapshot(targets[0], args).to_json())
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
