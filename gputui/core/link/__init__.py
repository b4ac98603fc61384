"""How a host is reached: the interface every transport speaks and the grammar of a target.

* ``interface``: a stream of samples in, commands out (``HostLink``), and its errors;
* ``targets``: a word that names a host, never an option or a shell word, wherever it came from.
"""

from gputui.core import lazy_face

TYPE_CHECKING = False
if TYPE_CHECKING:
    from gputui.core.link.interface import (
        SSH_CLIENTS,
        HostLink,
        LinkError,
        LinkOptions,
        configure_command,
        full_sample,
        one_shot_sample,
        probe_host,
        process_text,
    )
    from gputui.core.link.targets import BadTarget, TargetSpec, parse_target

__all__ = [
    "BadTarget",
    "HostLink",
    "LinkError",
    "LinkOptions",
    "SSH_CLIENTS",
    "TargetSpec",
    "configure_command",
    "full_sample",
    "probe_host",
    "one_shot_sample",
    "parse_target",
    "process_text",
]

_HOMES = {
    "BadTarget": "targets",
    "HostLink": "interface",
    "LinkError": "interface",
    "LinkOptions": "interface",
    "SSH_CLIENTS": "interface",
    "TargetSpec": "targets",
    "configure_command": "interface",
    "full_sample": "interface",
    "probe_host": "interface",
    "one_shot_sample": "interface",
    "parse_target": "targets",
    "process_text": "interface",
}
"""Each name of the face -> the module of this package that defines it (loaded on first use)."""

__getattr__ = lazy_face(__name__, _HOMES)
