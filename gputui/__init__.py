"""gputui: a terminal GPU monitor for the clean slate."""

__version__ = "0.1.0"
