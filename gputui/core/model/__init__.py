"""The host sample and the records it is made of: what a collector sent, typed and made safe.

* ``record``: the value classes of the data layer (declared like frozen dataclasses, built without their
  cost);
* ``snapshot``: the host sample (GPUs, processes, ports, errors) and its JSON form;
* ``fitness``: a GPU's own fitness as the collector read it (remaps, ECC, Xids, the kernel log);
* ``endpoint``: one inference server endpoint's latest sample;
* ``verdict``: findings and the clean-slate verdict as records, with the verdict's four levels;
* ``waits``: where a stuck thread of a process waits in the kernel;
* ``owner``: whose job a process is (user, unit, container, pod, Slurm step);
* ``profiler``: whether a process of a GPU job is a profiler or carries one's injection;
* ``remembered``: the GPU jobs and GPUs a collector remembers of its host since boot;
* ``figures``: figures no card can have; ``wire``: typed values read from a collector's JSON;
* ``history``: the last minutes of every GPU; ``procfilter``: the process panel's filter.
"""

from gputui.core import lazy_face

TYPE_CHECKING = False
if TYPE_CHECKING:
    from gputui.core.model.endpoint import EndpointSample
    from gputui.core.model.figures import impossible_error
    from gputui.core.model.fitness import GpuFitness, KernelLogNote, XidEvent
    from gputui.core.model.history import POINTS_MAX, STEP_S, WINDOW_S, GpuHistory, GpuPoint
    from gputui.core.model.owner import Owner, owner_matches, parse_owner_option, split_owner_word
    from gputui.core.model.probe import GpuProbe, ProbeReport, ProbeStep
    from gputui.core.model.procfilter import ProcFilter
    from gputui.core.model.profiler import ProfilerMark, profiler_name, profiler_options
    from gputui.core.model.record import COMPILE_AFTER, Record, field, fields, is_record, replace
    from gputui.core.model.remembered import GoneGpu, Remembered, RememberedJob
    from gputui.core.model.snapshot import (
        STATE_UNINTERRUPTIBLE,
        STATE_ZOMBIE,
        DeviceHolder,
        Gpu,
        GpuProcess,
        HostSnapshot,
        LiveThreads,
        Proc,
        ProcMemo,
        snapshots_document,
    )
    from gputui.core.model.verdict import (
        CANNOT_TELL,
        CLEAN,
        EXIT_CODES,
        NOT_CLEAN,
        NOT_READY,
        Finding,
        FindingFacts,
        GpuVerdict,
        Verdict,
        VerdictFact,
        VerdictFacts,
    )
    from gputui.core.model.waits import ThreadWait
    from gputui.core.model.wire import opt_float, opt_int, opt_safe, opt_str, plain, ports_of, safe, safe_list

__all__ = [
    "CANNOT_TELL",
    "CLEAN",
    "COMPILE_AFTER",
    "DeviceHolder",
    "EXIT_CODES",
    "Finding",
    "FindingFacts",
    "GoneGpu",
    "Gpu",
    "GpuFitness",
    "GpuHistory",
    "GpuPoint",
    "GpuProcess",
    "GpuVerdict",
    "EndpointSample",
    "HostSnapshot",
    "KernelLogNote",
    "LiveThreads",
    "NOT_CLEAN",
    "NOT_READY",
    "Owner",
    "POINTS_MAX",
    "Proc",
    "ProcMemo",
    "ProcFilter",
    "ProfilerMark",
    "Record",
    "GpuProbe",
    "ProbeReport",
    "ProbeStep",
    "Remembered",
    "RememberedJob",
    "STATE_UNINTERRUPTIBLE",
    "STATE_ZOMBIE",
    "STEP_S",
    "ThreadWait",
    "Verdict",
    "VerdictFact",
    "VerdictFacts",
    "WINDOW_S",
    "XidEvent",
    "field",
    "fields",
    "impossible_error",
    "is_record",
    "opt_float",
    "opt_int",
    "opt_safe",
    "opt_str",
    "owner_matches",
    "parse_owner_option",
    "plain",
    "ports_of",
    "profiler_name",
    "profiler_options",
    "replace",
    "safe",
    "safe_list",
    "snapshots_document",
    "split_owner_word",
]

_HOMES = {
    "CANNOT_TELL": "verdict",
    "CLEAN": "verdict",
    "COMPILE_AFTER": "record",
    "DeviceHolder": "snapshot",
    "EXIT_CODES": "verdict",
    "Finding": "verdict",
    "FindingFacts": "verdict",
    "Gpu": "snapshot",
    "GpuFitness": "fitness",
    "GpuHistory": "history",
    "GpuPoint": "history",
    "GpuProcess": "snapshot",
    "GoneGpu": "remembered",
    "GpuVerdict": "verdict",
    "EndpointSample": "endpoint",
    "HostSnapshot": "snapshot",
    "KernelLogNote": "fitness",
    "LiveThreads": "snapshot",
    "NOT_CLEAN": "verdict",
    "NOT_READY": "verdict",
    "Owner": "owner",
    "POINTS_MAX": "history",
    "Proc": "snapshot",
    "ProcMemo": "snapshot",
    "ProcFilter": "procfilter",
    "ProfilerMark": "profiler",
    "profiler_name": "profiler",
    "profiler_options": "profiler",
    "Record": "record",
    "GpuProbe": "probe",
    "ProbeReport": "probe",
    "ProbeStep": "probe",
    "Remembered": "remembered",
    "RememberedJob": "remembered",
    "STATE_UNINTERRUPTIBLE": "snapshot",
    "STATE_ZOMBIE": "snapshot",
    "STEP_S": "history",
    "ThreadWait": "waits",
    "Verdict": "verdict",
    "VerdictFact": "verdict",
    "VerdictFacts": "verdict",
    "WINDOW_S": "history",
    "XidEvent": "fitness",
    "field": "record",
    "fields": "record",
    "impossible_error": "figures",
    "is_record": "record",
    "opt_float": "wire",
    "opt_int": "wire",
    "opt_safe": "wire",
    "opt_str": "wire",
    "owner_matches": "owner",
    "parse_owner_option": "owner",
    "plain": "wire",
    "ports_of": "wire",
    "replace": "record",
    "safe": "wire",
    "safe_list": "wire",
    "snapshots_document": "snapshot",
    "split_owner_word": "owner",
}
"""Each name of the face -> the module of this package that defines it (loaded on first use)."""

__getattr__ = lazy_face(__name__, _HOMES)
