"""Machine text made safe, and how figures and command lines read on a screen.

* ``safe``: the client's face of the one text policy (control characters made visible on the way in);
* ``display``: the dash for a missing value, durations, times of day, memory sizes, text cut to a width;
* ``cmdline``: the program's name and the arguments that say what a process is.

Shared by the TUI and the command line alike; imports nothing else of gputui's core.
"""

from gputui.core import lazy_face

TYPE_CHECKING = False
if TYPE_CHECKING:
    from gputui.core.text.cmdline import command_display, command_words, program_name
    from gputui.core.text.display import DASH, age_since, age_text, clock_time, dash, duration, fit, size_text
    from gputui.core.text.safe import ELLIPSIS, SafeText, json_visible, visible, visible_cmdline, visible_tree

__all__ = [
    "DASH",
    "ELLIPSIS",
    "SafeText",
    "age_since",
    "age_text",
    "clock_time",
    "command_display",
    "command_words",
    "dash",
    "duration",
    "fit",
    "json_visible",
    "program_name",
    "size_text",
    "visible",
    "visible_cmdline",
    "visible_tree",
]

_HOMES = {
    "DASH": "display",
    "ELLIPSIS": "safe",
    "SafeText": "safe",
    "age_since": "display",
    "age_text": "display",
    "clock_time": "display",
    "command_display": "cmdline",
    "command_words": "cmdline",
    "dash": "display",
    "duration": "display",
    "fit": "display",
    "json_visible": "safe",
    "program_name": "cmdline",
    "size_text": "display",
    "visible": "safe",
    "visible_cmdline": "safe",
    "visible_tree": "safe",
}
"""Each name of the face -> the module of this package that defines it (loaded on first use)."""

__getattr__ = lazy_face(__name__, _HOMES)
