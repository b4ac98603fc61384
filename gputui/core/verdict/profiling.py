"""Profiled jobs: a GPU job that runs under a profiler, said once, with the options that matter and one
sentence of advice; and the jobs whose profiler cannot be known.

A job is *profiled* when one of its members (its root included) is a profiler (``nsys profile``, ``nsys
launch``, their agent or launcher, ``ncu``) or carries a profiler's injection in its environment
(``gputui.core.jobs.profiled``): the story's server, launched under ``nsys profile --trace=cuda,nvtx`` with
layer-wise NVTX markers, wedged under the profiler's overhead. The finding names the profiler, the process
it was found on and its options that matter (trace kinds, NVTX, CUDA graph tracing, the capture range, the
output), and what to do. Members whose environment could not be read (another user's processes) are counted
in one ``profiler_unknown`` finding: never a guess either way.

Both are worded from their facts (``FindingFacts.profiler``, ``count``): the exporter publishes those, and
the fleet words them again with the same functions (``wording.FINDING_WORDS``). Nothing here does I/O.
"""

from __future__ import annotations

from gputui.core.jobs import profiled_jobs, shown
from gputui.core.model import Finding, FindingFacts, HostSnapshot, profiler_name, profiler_options

KIND = "profiled"
UNKNOWN_KIND = "profiler_unknown"
KINDS = (KIND, UNKNOWN_KIND)

ADVICE = {
    "nsys": "tracing every CUDA call and NVTX range can stall a latency-bound server: bound the capture "
    "(--capture-range=cudaProfilerApi, or --delay and --duration) and end it by stopping the application, "
    "not nsys, so that the report gets written",
    "ncu": "Nsight Compute replays every kernel it profiles many times: profile a few kernels "
    "(--launch-count, -k) of a short run, never a server that must answer in time",
}
"""What to do about a job under each profiler, one sentence."""
INJECTION_ADVICE = (
    "a profiler's library hooks every CUDA call of this process: unset the variable before judging its "
    "speed or its health, or bound the capture"
)


def profiled_words(target: str, f: FindingFacts) -> Finding:
    """A job that runs under a profiler (``profiler``) found on pid ``pid``, the job of ``root_pid``."""
    mark = f.profiler
    job = f"the job of pid {f.root_pid} ({shown(f.root_name)})"
    subject = f"pid {f.pid} ({shown(f.name)})"
    if mark is None:  # facts that lost their profiler on the way: say what is left
        return Finding(kind=KIND, target=target, pid=f.pid, detail=f"{job} runs under a profiler ({subject})")
    name = profiler_name(mark)
    options = profiler_options(mark)
    if mark.via == "argv":
        detail = f"{job} runs under {name}" + ("" if f.pid == f.root_pid else f", {subject}")
        action = ADVICE.get(mark.tool or "", INJECTION_ADVICE)
    else:
        detail = f"{job} is profiled: {subject} carries the injection of {name}"
        action = INJECTION_ADVICE
    return Finding(
        kind=KIND,
        target=target,
        pid=f.pid,
        detail=f"{detail}: {options}" if options else detail,
        action=action,
        facts=f,
    )


def profiler_unknown_words(target: str, f: FindingFacts) -> Finding:
    """``count`` processes of GPU jobs whose environment could not be read, in jobs with no profiler
    found."""
    count = f.count or 0
    return Finding(
        kind=UNKNOWN_KIND,
        target=target,
        detail=f"profiler: unknown for {count} process{'' if count == 1 else 'es'} of GPU jobs (their "
        "environment cannot be read: another user's, or /proc mounted with hidepid)",
        action="run gputui as root, or as their user, to tell whether they run under a profiler",
        facts=f,
    )


def profiled_findings(snapshot: HostSnapshot) -> list[Finding]:
    """One ``profiled`` finding per GPU job under a profiler, then one ``profiler_unknown`` for the members
    of the other jobs whose environment could not be read."""
    findings: list[Finding] = []
    unknown = 0
    for job in profiled_jobs(snapshot):
        if job.mark is None or job.subject is None:
            unknown += job.unreadable
            continue
        facts = FindingFacts(
            pid=job.subject.pid,
            name=job.subject.name,
            root_pid=job.root.pid,
            root_name=job.root.name,
            profiler=job.mark,
        )
        findings.append(profiled_words(snapshot.target, facts))
    if unknown:
        findings.append(profiler_unknown_words(snapshot.target, FindingFacts(count=unknown)))
    return findings
