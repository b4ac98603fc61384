"""What a server's job (its launcher's process tree) shows that its health answers cannot: dead members.

A launcher whose schedulers turned ``<defunct>`` may still answer 503 the way a loading one does, and one
whose engine threads are stuck in the driver may still move its token counter now and then. The server's
state (``state.ServerStateTracker``) weighs these facts from the same snapshot as its probe:

* any defunct member (a zombie or a defunct leader) means the job is not starting up: a 503 is UNHEALTHY;
* a defunct leader holding GPU memory, or a zombie GPU worker past ``ZOMBIE_SETTLED_S`` (a child that
  exited a moment ago does not count), means the job is not merely busy: BUSY ("do not kill") is not said;
* a profiler in the job (``jobs.profiled``): an UNHEALTHY or STALLED server's reason names it (the overhead
  may be why);
* its GPUs busy at idle power (``spinning.JobSpin``, kept across samples by the watch): with no token
  generated for as long, the server is STALLED on a collective that is likely hung.
"""

from __future__ import annotations

from gputui.core.jobs import D_STATE_THRESHOLD_S, proc_label, profiler_of_pid, sample_index
from gputui.core.model import HostSnapshot, Proc, Record, profiler_name

TYPE_CHECKING = False
if TYPE_CHECKING:
    from gputui.core.servers.spinning import JobSpin

ZOMBIE_SETTLED_S = D_STATE_THRESHOLD_S
"""A zombie of the job counts against BUSY once it has been defunct this long (the zombie finding's
threshold): a worker that exited a moment ago is still being reaped."""


class JobFacts(Record):
    """The dead members of one server's job.

    Attributes:
        defunct: Labels ("4241 (python3)") of its zombies and defunct leaders, whatever their age.
        not_busy: Why BUSY must not be said of it (one clause), "" when nothing forbids it.
        profiled: The profiler it runs under (one clause: "under Nsight Systems (nsys profile), pid 4100"),
            "" when none is known.
        spin: Its GPUs as the watch's spin tracker saw them (``spinning.JobSpin``); None where the job is
            not known or holds no GPU.
    """

    defunct: tuple[str, ...] = ()
    not_busy: str = ""
    profiled: str = ""
    spin: JobSpin | None = None

    def defunct_text(self) -> str:
        """ "2 defunct members in its job" (the findings name them, with what to do about each)."""
        count = len(self.defunct)
        return f"{count} defunct member{'' if count == 1 else 's'} in its job"


def _job_members(snapshot: HostSnapshot, launcher_pid: int | None) -> list[Proc]:
    """The listed processes of the launcher's tree; without a launcher, those of every GPU process tree (a
    server whose launcher is not known is judged by every GPU job on the host: the cautious side). Both are
    looked up in the sample's index (``jobs.sample_index``)."""
    index = sample_index(snapshot)
    if launcher_pid is None:
        tree = index.tree_pids
        return [proc for pid, proc in index.listed.items() if pid in tree]
    return index.members(launcher_pid)


def job_facts(snapshot: HostSnapshot, launcher_pid: int | None) -> JobFacts:
    """The dead members of the job of the launcher ``launcher_pid`` in ``snapshot`` (pure)."""
    now_s = snapshot.time
    defunct: list[str] = []
    not_busy = ""
    for proc in sorted(_job_members(snapshot, launcher_pid), key=lambda p: p.pid):
        if not proc.is_zombie:
            continue
        defunct.append(proc_label(proc))
        if not_busy:
            continue
        if proc.is_defunct_leader and proc.gpu_total_mib:
            not_busy = f"pid {proc_label(proc)} is a defunct leader holding {proc.gpu_total_mib} MiB"
        elif not proc.is_defunct_leader and proc.state_since is not None and now_s is not None:
            if now_s - proc.state_since >= ZOMBIE_SETTLED_S:
                not_busy = f"pid {proc_label(proc)} of its job is defunct"
    return JobFacts(
        defunct=tuple(defunct), not_busy=not_busy, profiled=profiled_clause(snapshot, launcher_pid)
    )


def profiled_clause(snapshot: HostSnapshot, launcher_pid: int | None) -> str:
    """ "its job is under Nsight Systems (nsys profile)" for a launcher whose job is profiled (any GPU job
    of the host, where the launcher is not known; the profiled finding names the process); "" otherwise."""
    found = profiler_of_pid(snapshot, launcher_pid)
    if found is None or found.mark is None or found.subject is None:
        return ""
    return f"its job is under {profiler_name(found.mark)}"
