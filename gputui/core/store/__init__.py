"""The files gputui keeps (each opened through ``gputui.agent.safefile``, THE safe opener, which the
collector uses on its host too).

* ``saved``: calibrated GPU baselines, watched ports, the audit log's place;
* ``config``: the user's config file;
* ``leftovers``: the record of what killed jobs left behind (segments, semaphores, MPS daemons).
"""

from gputui.core import lazy_face

TYPE_CHECKING = False
if TYPE_CHECKING:
    from gputui.core.store.config import Config, ConfigError, default_config_path, load_config
    from gputui.core.store.saved import (
        StoreError,
        WatchedPort,
        atomic_write_text,
        load_baselines,
        load_calibrated_uuids,
        load_watched_ports,
        save_baselines,
        save_watched_ports,
        state_dir,
        watched_ports,
    )

__all__ = [
    "Config",
    "ConfigError",
    "StoreError",
    "WatchedPort",
    "atomic_write_text",
    "default_config_path",
    "load_baselines",
    "load_calibrated_uuids",
    "load_config",
    "load_watched_ports",
    "save_baselines",
    "save_watched_ports",
    "state_dir",
    "watched_ports",
]

_HOMES = {
    "Config": "config",
    "ConfigError": "config",
    "StoreError": "saved",
    "WatchedPort": "saved",
    "atomic_write_text": "saved",
    "default_config_path": "config",
    "load_baselines": "saved",
    "load_calibrated_uuids": "saved",
    "load_config": "config",
    "load_watched_ports": "saved",
    "save_baselines": "saved",
    "save_watched_ports": "saved",
    "state_dir": "saved",
    "watched_ports": "saved",
}
"""Each name of the face -> the module of this package that defines it (loaded on first use)."""

__getattr__ = lazy_face(__name__, _HOMES)
