"""The fleet: many hosts through the Prometheus they already run.

* ``schema``: the names ``gputui exporter`` serves and the fleet reads back (one table for both sides);
* ``exposition``: one judged host sample as Prometheus families;
* ``exported``: what a host's exporter said, read back (findings as data, worded by the one table);
* ``sample``: each host's sample in the common shape, and what only DCGM tells;
* ``owners``: whose jobs a fleet host's GPUs run; ``rows``: one summary row per host, sorting and filtering.
"""

from gputui.core import lazy_face

TYPE_CHECKING = False
if TYPE_CHECKING:
    from gputui.core.fleet.exported import ExportedGpu, ExportedHost, ExportedServer, ExportedSubject
    from gputui.core.fleet.exposition import ExportedSample, ExporterFigures, families, server_port
    from gputui.core.fleet.owners import DCGM_OWNER_LABELS, dcgm_owner
    from gputui.core.fleet.rows import (
        DEFAULT_REFRESH_S,
        DEFAULT_SSH_TARGET,
        SORT_MODES,
        FleetRow,
        analyze_fleet,
        baseline_text,
        check_template,
        findings_text,
        fleet_baselines,
        hottest_text,
        matches,
        memory_only,
        memory_text,
        sort_key,
        ssh_target_for,
        state_text,
        summarize,
        xid_text,
    )
    from gputui.core.fleet.sample import DEFAULT_STALE_AFTER_S, FleetHost, FleetSample, MigInstance

__all__ = [
    "DCGM_OWNER_LABELS",
    "DEFAULT_REFRESH_S",
    "DEFAULT_SSH_TARGET",
    "DEFAULT_STALE_AFTER_S",
    "ExportedGpu",
    "ExportedHost",
    "ExportedSample",
    "ExportedServer",
    "ExportedSubject",
    "ExporterFigures",
    "FleetHost",
    "FleetRow",
    "FleetSample",
    "MigInstance",
    "SORT_MODES",
    "analyze_fleet",
    "baseline_text",
    "check_template",
    "dcgm_owner",
    "families",
    "findings_text",
    "fleet_baselines",
    "hottest_text",
    "matches",
    "memory_only",
    "memory_text",
    "server_port",
    "sort_key",
    "ssh_target_for",
    "state_text",
    "summarize",
    "xid_text",
]

_HOMES = {
    "DCGM_OWNER_LABELS": "owners",
    "DEFAULT_REFRESH_S": "rows",
    "DEFAULT_SSH_TARGET": "rows",
    "DEFAULT_STALE_AFTER_S": "sample",
    "ExportedGpu": "exported",
    "ExportedHost": "exported",
    "ExportedSample": "exposition",
    "ExportedServer": "exported",
    "ExportedSubject": "exported",
    "ExporterFigures": "exposition",
    "FleetHost": "sample",
    "FleetRow": "rows",
    "FleetSample": "sample",
    "MigInstance": "sample",
    "SORT_MODES": "rows",
    "analyze_fleet": "rows",
    "baseline_text": "rows",
    "check_template": "rows",
    "dcgm_owner": "owners",
    "families": "exposition",
    "findings_text": "rows",
    "fleet_baselines": "rows",
    "hottest_text": "rows",
    "matches": "rows",
    "memory_only": "rows",
    "memory_text": "rows",
    "server_port": "exposition",
    "sort_key": "rows",
    "ssh_target_for": "rows",
    "state_text": "rows",
    "summarize": "rows",
    "xid_text": "rows",
}
"""Each name of the face -> the module of this package that defines it (loaded on first use)."""

__getattr__ = lazy_face(__name__, _HOMES)
