"""The names of what ``gputui exporter`` serves and the fleet view reads back: one table for both sides.

Every series carries ``Hostname`` (the label dcgm-exporter sets, so gputui's series join DCGM's by host) and,
per GPU, ``gpu`` (index) and ``UUID`` as DCGM names them. Labels from machines are bounded: process names
(``comm``) go through the text policy and are cut to ``COMM_MAX``; command lines, environments, users and
URLs are never labels; a server is named by its port alone. Per-process series exist only for the subjects
of findings, at most ``MAX_SUBJECTS`` per host (``gputui_finding_subjects_omitted`` counts the rest), and
GPUs are cut at ``MAX_GPUS``.

Units follow Prometheus's conventions (bytes, seconds, ratios, Celsius, watts); the fleet converts memory
to MiB on the way in.
"""

from __future__ import annotations

PREFIX = "gputui_"
HOST_LABEL = "Hostname"
GPU_LABEL = "gpu"
UUID_LABEL = "UUID"
MODEL_LABEL = "modelName"
KIND_LABEL = "kind"
PID_LABEL = "pid"
COMM_LABEL = "comm"
PPID_LABEL = "ppid"
PARENT_COMM_LABEL = "parent_comm"
STATE_LABEL = "state"
REASON_LABEL = "reason"
PORT_LABEL = "port"
ENGINE_LABEL = "engine"
CHECK_LABEL = "check"
ACTION_LABEL = "action"
NAME_LABEL = "name"
FABRIC_MANAGER_LABEL = "fabric_manager"
SCOPE_LABEL = "scope"
ERROR_LABEL = "error"
WHY_LABEL = "why"
TID_LABEL = "tid"
SYMBOL_LABEL = "symbol"
MODULE_LABEL = "module"
STACK_LABEL = "stack"
KILLED_LABEL = "killed"

MIB = 1 << 20
COMM_MAX = 32
"""Longest process name in a label (the kernel's comm is 15 bytes; escapes can make it longer)."""
MAX_SUBJECTS = 32
"""Processes named in per-process series per host; further subjects are only counted."""
MAX_GPUS = 64
MAX_SERVERS = 16

# --- families ----------------------------------------------------------------------------------------
INFO = "gputui_exporter"
"""Info family (served as ``gputui_exporter_info``): version, collector mode, driver."""
INFO_SERIES = "gputui_exporter_info"
SAMPLE_TIME = "gputui_sample_timestamp_seconds"
SAMPLE_AGE = "gputui_sample_age_seconds"
SAMPLE_DURATION = "gputui_sample_duration_seconds"
HOST_UP = "gputui_host_up"
"""1 when the collector read the host without a host-level error (a driver, at least one GPU)."""
CHECK_AVAILABLE = "gputui_check_available"
"""Per ``check``: 1 when this exporter can do it, 0 when it cannot (never a 0 in the check's own series)."""
COLLECTOR_CPU = "gputui_collector_cpu_seconds"
"""Counter (served as ``gputui_collector_cpu_seconds_total``): CPU time the collector's samples took."""
COLLECTOR_CPU_SERIES = "gputui_collector_cpu_seconds_total"
SCRAPE_DURATION = "gputui_scrape_duration_seconds"
"""How long building the previous scrape's answer took (a scrape cannot time itself)."""
SCRAPES = "gputui_scrapes"

GPU_MEMORY_USED = "gputui_gpu_memory_used_bytes"
GPU_MEMORY_TOTAL = "gputui_gpu_memory_total_bytes"
GPU_UTILIZATION = "gputui_gpu_utilization_ratio"
GPU_TEMPERATURE = "gputui_gpu_temperature_celsius"
GPU_POWER = "gputui_gpu_power_watts"
GPU_READABLE = "gputui_gpu_readable"
GPU_BASELINE = "gputui_gpu_baseline_bytes"
BASELINE_TOLERANCE = "gputui_baseline_tolerance_bytes"
"""How far over its baseline a GPU's memory may be and still be at baseline: the tolerance the host's verdict
was judged with (one per host, as ``Baselines.tolerance_mib``)."""
GPU_PROCESSES = "gputui_gpu_processes"
"""Processes the driver lists on the GPU (visible here or not)."""
GPU_PROCESS_MEMORY = "gputui_gpu_process_memory_bytes"
"""What the listed processes hold, summed; absent when the driver does not say for every one."""

# --- a GPU's own fitness (per GPU whose fitness the collector read; none of them where it read none) ------
GPU_FITNESS_ACTION = "gputui_gpu_fitness_action"
"""State set per GPU (``action``: every action of ``verdict.fitness``, ``none`` included): 1 for what the
GPU's fitness asks for before the next launch, 0 for the others (the one derivation, ``verdict.assessed``)."""
GPU_RECOVERY_ACTION = "gputui_gpu_recovery_action"
"""The driver's own recovery action (NVML field 230, ``nvmlDeviceGpuRecoveryAction_t``: 0 None, 1 GPU Reset,
2 Node Reboot, 3 Drain P2P, 4 Drain and Reset, 5 Recover IMEX Domain, 6 Bus Reset, 7 System Reboot), NVIDIA's
name in ``name``; absent where the driver reports none (before R565)."""
GPU_FABRIC_STATE = "gputui_gpu_fabric_state"
"""The GPU's NVLink fabric registration (``NVML_GPU_FABRIC_STATE_*``: 1 not started, 2 in progress, 3
completed), its name in ``state`` (``FABRIC_STATES``) and, where the collector looked (registration not
complete), whether the fabric manager runs in ``fabric_manager`` ("running", "not running"); absent on a GPU
without an NVLink fabric."""
GPU_FABRIC_STATUS = "gputui_gpu_fabric_status"
"""The ``nvmlReturn_t`` the fabric registration ended with (0: success); absent without a fabric."""
GPU_ROW_REMAP_PENDING = "gputui_gpu_row_remap_pending"
"""1 when a row remap waits for a reset of the GPU (absent: the driver would not say)."""
GPU_ROW_REMAP_FAILED = "gputui_gpu_row_remap_failed"
GPU_RETIRED_PAGES_PENDING = "gputui_gpu_retired_pages_pending"
GPU_RESET_REQUIRED = "gputui_gpu_reset_required"
"""1 when NVML answered a fitness query with RESET_REQUIRED."""
GPU_ECC_UNCORRECTED = "gputui_gpu_ecc_uncorrected_errors"
"""Uncorrected ECC errors, ``scope`` "volatile" (since the last reset) or "aggregate" (the GPU's life)."""
GPU_REMAPPED_ROWS = "gputui_gpu_remapped_rows"
"""Rows remapped, ``error`` "correctable" or "uncorrectable"."""
GPU_FITNESS_FLAGS = {
    GPU_ROW_REMAP_PENDING: "remap_pending",
    GPU_ROW_REMAP_FAILED: "remap_failure",
    GPU_RETIRED_PAGES_PENDING: "retired_pages_pending",
    GPU_RESET_REQUIRED: "reset_required",
}
"""Each 0/1 fitness family -> the ``GpuFitness`` field it holds."""
ECC_SCOPES = {"volatile": "ecc_uncorrected_volatile", "aggregate": "ecc_uncorrected_aggregate"}
REMAPPED_ROWS = {"correctable": "remapped_rows_correctable", "uncorrectable": "remapped_rows_uncorrectable"}
FABRIC_STATES = {1: "not_started", 2: "in_progress", 3: "completed"}
"""``NVML_GPU_FABRIC_STATE_*`` as the ``state`` label says it (another code: ``state`` is its number)."""
GPU_FITNESS_FAMILIES = (
    GPU_FITNESS_ACTION,
    GPU_RECOVERY_ACTION,
    GPU_FABRIC_STATE,
    GPU_FABRIC_STATUS,
    *GPU_FITNESS_FLAGS,
    GPU_ECC_UNCORRECTED,
    GPU_REMAPPED_ROWS,
)
"""What a GPU's fitness is exported as: the fields its NOT READY sentence is rebuilt from in the fleet."""

CLEAN_SLATE = "gputui_clean_slate"
"""1 clean, 0 not clean or cannot tell; per GPU (``gpu`` label) and per host (no ``gpu`` label)."""
CLEAN_SLATE_KNOWN = "gputui_clean_slate_known"
"""0 when the verdict cannot be told (host error, unreadable GPU): then ``gputui_clean_slate`` is 0 too."""

FINDINGS = "gputui_findings"
"""Findings by kind (and GPU, where a finding has one): a count, 0 for kinds the exporter checks."""
FINDING_MEMORY = "gputui_finding_memory_bytes"
"""GPU memory the findings of a kind hold on a GPU."""
SUBJECT = "gputui_finding_process"
"""1 per subject of a finding: ``kind``, ``pid``, ``comm``, ``ppid``, ``parent_comm`` labels."""
SUBJECT_MEMORY = "gputui_finding_process_memory_bytes"
SUBJECT_SINCE = "gputui_finding_process_state_since_timestamp_seconds"
SUBJECT_THREADS = "gputui_finding_process_threads"
"""Live threads of a defunct leader, by state letter."""
SUBJECTS_OMITTED = "gputui_finding_subjects_omitted"
SUBJECT_JOB = "gputui_finding_process_job"
"""1 per subject tied to a job: a survivor's killed job, or the job a defunct process of a job whose GPU
memory is gone belonged to (``root_pid``, ``root_comm``), what ties it to it (``why``) and, where an
action stops it, whose it is (``owner``, ``container:trainer``)."""
OWNER_MAX = 80
WHY_MAX = 16
SUBJECT_WAIT = "gputui_finding_process_thread_wait"
"""1 per stuck thread of a subject (at most ``WAITS_MAX`` per process): its ``tid``, its ``state`` (``D``,
``R``), where it waits in the kernel (``symbol``, ``module``: kernel names as the collector's answer was
checked for them, "" unknown), whether that place was read from its kernel stack (``stack``: "1", "0") and
whether a SIGKILL waits for it (``killed``: "1", "0", "" not known): the places a finding names and the
reboot they call for (``FindingFacts.waits``)."""
SUBJECT_WAIT_SINCE = "gputui_finding_process_thread_wait_since_timestamp_seconds"
"""Since when the collector has seen a stuck thread so (``tid``; epoch seconds, the host's clock); absent when
not known."""
WAITS_MAX = 8
"""Stuck threads per subject, as many as the collector's answer keeps (``model.waits.WAITS_MAX``)."""
KERNEL_NAME_MAX = 128
"""Longest kernel function or module name in a label (as long as the collector's answer may name one)."""
SUBJECT_WINDOW = "gputui_finding_process_window_seconds"
"""How long a finding's pattern had to last before it was said (a spinning collective's window), per subject,
with what did not move in it (``why``: ``tokens``, ``cpu``)."""
SUBJECT_PROFILER = "gputui_finding_process_profiler"
"""1 per subject of a ``profiled`` finding: the profiler found on it (``tool``: nsys, ncu, cupti, tool), how
(``via``: argv, environ), its ``command`` and the options the finding names (``trace``, ``cuda_graph_trace``,
``capture_range``, ``output``: the report's path, cut to ``PROFILER_TEXT_MAX``) or, for an injection, the
variables that carry it (``keys``) and the profiler library they name (``library``: a name from gputui's own
table, never another value of the environment)."""
PROFILER_LABELS = (
    "tool",
    "via",
    "command",
    "trace",
    "cuda_graph_trace",
    "capture_range",
    "output",
    "library",
)
PROFILER_TEXT_MAX = 160
PROFILER_UNKNOWN = "gputui_finding_profiler_unknown_processes"
"""Processes of GPU jobs with no profiler found whose environment could not be read (the
``profiler_unknown`` finding's count)."""

GHOST_HOLDERS_KNOWN = "gputui_finding_ghost_holders_known"
"""Per GPU with ghost memory: 1 when the device holders could be read (no suspect then means none)."""
GHOST_SUSPECT = "gputui_finding_ghost_suspect"
"""1 per process that may hold a GPU's ghost memory: ``gpu``, ``pid``, ``comm`` and the ``device`` node it
has open (at most ``MAX_SUBJECTS`` per host)."""

SERVER_STATE = "gputui_server_state"
"""State set per server (``port``, ``engine``): 1 for its current state, 0 for the others."""
SERVER_STATE_SINCE = "gputui_server_state_since_timestamp_seconds"

PROCESS_KINDS = (
    "zombie",
    "defunct_leader",
    "orphan",
    "uninterruptible",
    "survivor",
    "invisible_pid",
    "profiled",
    "stuck_thread",
    "spinning",
)
"""Finding kinds whose subject is a process (named in per-process series); a spinning collective's is its
job's root."""
GPU_KINDS = ("ghost_memory",)
HOST_KINDS = ("profiler_unknown",)
EXPORTED_KINDS = (*PROCESS_KINDS, *GPU_KINDS, *HOST_KINDS)
"""Every kind the exporter judges (``xid`` comes from DCGM)."""

CHECK_OTHER_USERS = "other_users_processes"
"""Another user's open files and threads: needs root (ghost-memory suspects, device holders)."""
CHECK_KERNEL_LOG = "kernel_log"
"""The kernel log (Xid lines): readable by root or with dmesg unrestricted."""
CHECK_GPU_HEALTH = "gpu_health"
"""Each GPU's fitness (remapped rows, ECC, the driver's recovery action, the NVLink fabric): 1 when the
collector read it for some GPU (then the ``gputui_gpu_*`` fitness families say it), 0 otherwise."""

# Verdict reasons (bounded): what keeps a GPU, or a host, from a clean slate.
REASON_CLEAN = "clean"
REASON_HELD = "held"
"""A process holds memory over the baseline."""
REASON_LISTED = "listed"
"""Memory at the baseline but a process is still listed."""
REASON_GHOST = "ghost_memory"
"""Memory over the baseline with no process listed."""
REASON_FITNESS = "gpu_health"
"""Memory at the baseline and nothing listed, but the GPU itself is not fit (NOT READY): the fitness families
(``gputui_gpu_fitness_action``) say what it needs."""
REASON_UNREADABLE = "unreadable"
REASON_HOST_ERROR = "host_error"
REASON_GPU = "gpu"
"""Host level: a GPU is not clean."""
REASON_REMNANT = "remnant"
"""Host level: a zombie or D-state process is left in a GPU tree."""
REASONS = (
    REASON_CLEAN,
    REASON_HELD,
    REASON_LISTED,
    REASON_GHOST,
    REASON_FITNESS,
    REASON_UNREADABLE,
    REASON_HOST_ERROR,
    REASON_GPU,
    REASON_REMNANT,
)
