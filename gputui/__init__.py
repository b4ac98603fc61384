"""gputui: a terminal GPU monitor for the clean slate."""

from gputui.agent.protocol import VERSION as __version__

__all__ = ["__version__"]
