"""``python3 -m gputui.agent``: the collector's remote form on stdio (see ``serve``)."""

import sys

from gputui.agent.remote.serve import main

sys.exit(main())
