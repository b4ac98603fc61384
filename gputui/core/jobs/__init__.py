"""The process forest of a host sample: who holds GPU memory, the job each holder belongs to, and its tree.

* ``forest``: GPU process trees rooted and walked the way the collector roots and walks them (the tree
  shown is the tree a kill takes); built once per sample by the verdict engine and handed to every view;
* ``jobview``: a job's members as one view sees them (alike idle members folded into one row);
* ``profiled``: which jobs run under a profiler (a member that is one, or carries its injection).
"""

from gputui.core import lazy_face

TYPE_CHECKING = False
if TYPE_CHECKING:
    from gputui.core.jobs.forest import (
        D_STATE_THRESHOLD_S,
        GRAPHICS,
        NAME_MAX,
        ProcNode,
        SampleIndex,
        build_forest,
        flatten,
        gpu_memory_by_pid,
        gpu_tree_pids,
        graphics_only_pids,
        is_init_like,
        is_session_boundary,
        kill_all_roots,
        proc_label,
        proc_table,
        sample_index,
        service_note,
        service_of,
        shown,
        tree_parent,
    )
    from gputui.core.jobs.jobview import (
        FOLD_AT,
        FoldedMembers,
        find_folds,
        finding_pids,
        first_gpu_row,
        fold_key,
        fold_members,
        outside_rows,
        place_folds,
    )
    from gputui.core.jobs.profiled import ProfiledJob, profiled_jobs, profiler_of_pid

__all__ = [
    "D_STATE_THRESHOLD_S",
    "FOLD_AT",
    "FoldedMembers",
    "GRAPHICS",
    "NAME_MAX",
    "ProcNode",
    "ProfiledJob",
    "SampleIndex",
    "build_forest",
    "find_folds",
    "finding_pids",
    "first_gpu_row",
    "flatten",
    "fold_key",
    "fold_members",
    "gpu_memory_by_pid",
    "gpu_tree_pids",
    "graphics_only_pids",
    "is_init_like",
    "is_session_boundary",
    "kill_all_roots",
    "outside_rows",
    "place_folds",
    "proc_label",
    "proc_table",
    "profiled_jobs",
    "profiler_of_pid",
    "sample_index",
    "service_note",
    "service_of",
    "shown",
    "tree_parent",
]

_HOMES = {
    "D_STATE_THRESHOLD_S": "forest",
    "FOLD_AT": "jobview",
    "FoldedMembers": "jobview",
    "GRAPHICS": "forest",
    "NAME_MAX": "forest",
    "ProcNode": "forest",
    "SampleIndex": "forest",
    "build_forest": "forest",
    "find_folds": "jobview",
    "finding_pids": "jobview",
    "first_gpu_row": "jobview",
    "flatten": "forest",
    "fold_key": "jobview",
    "fold_members": "jobview",
    "gpu_memory_by_pid": "forest",
    "gpu_tree_pids": "forest",
    "graphics_only_pids": "forest",
    "is_init_like": "forest",
    "is_session_boundary": "forest",
    "kill_all_roots": "forest",
    "outside_rows": "jobview",
    "place_folds": "jobview",
    "proc_label": "forest",
    "proc_table": "forest",
    "ProfiledJob": "profiled",
    "profiled_jobs": "profiled",
    "profiler_of_pid": "profiled",
    "sample_index": "forest",
    "service_note": "forest",
    "service_of": "forest",
    "shown": "forest",
    "tree_parent": "forest",
}
"""Each name of the face -> the module of this package that defines it (loaded on first use)."""

__getattr__ = lazy_face(__name__, _HOMES)
