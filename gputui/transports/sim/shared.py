"""The demo's shared host (``gpu-node-09``): several users' jobs and what the last ones left, one finding of
each kind the wedge does not show.

* GPU0: dana's fine-tuning run, its launcher gone (its parent is init): an *orphan*.
* erik's ``torchrun`` job was ended by the scheduler before the demo began: the collector remembers it, one
  of its data-loader workers still runs (a *survivor*), and its NCCL segment is still in /dev/shm (a
  *leftover*).
* GPU2: gil's checkpoint writer in D (*uninterruptible*).
* GPU3: hana's benchmark, a thread of it in the driver (``os_acquire_mutex`` in ``nvidia``) while the
  process itself sleeps (*stuck_thread*; past ``STUCK_WINDOW_S`` its finding says a reboot is the likely end).
* GPU4: a process of a container, its pid from another PID namespace (*invisible_pid*).
* GPU5: fern's evaluation, another user's process whose environment cannot be read (*profiler_unknown*); the
  GPU had an Xid 13 earlier (an NVML event: the application must restart, the GPU is fit: *xid*).
* the collector runs without root: the kernel log cannot be read (*xid_history*).

GPUs 6 and 7 are idle. Every figure is deterministic, times relative to when the host was opened.
"""

from __future__ import annotations

from gputui.agent import protocol
from gputui.core.model import KernelLogNote, Remembered, ThreadWait, XidEvent, safe
from gputui.transports.sim.scenario import BOOT_EPOCH_S, CLOCK_TICKS_PER_S, SimProc

ORPHAN_PID = 6210
SURVIVOR_PID = 6105
TORCHRUN_PID = 6100
CHECKPOINT_PID = 6301
STUCK_PID = 6400
STUCK_TID = 6407
EVAL_PID = 6500
INVISIBLE = {4: (71, 16384)}
"""GPU index -> (pid in another PID namespace, MiB) the driver lists there."""
XID_GPU = 5
XID_APP = 13
KERNEL_LOG_ERROR = "dmesg: read kernel buffer failed: Operation not permitted"
"""What util-linux's dmesg says without root where kernel.dmesg_restrict is 1."""
SEGMENT = {
    "path": "/dev/shm/nccl-9Qx2Lm",  # noqa: S108 (a name shown, never a path used)
    "dev": 27,
    "inode": 4711,
    "uid": 1011,
    "size_bytes": 9_437_184,
    "user": "erik",
}
JOB_ENDED_BEFORE_S = 420.0
"""Seconds before the host was opened that the scheduler ended erik's job."""


def shared_processes() -> list[SimProc]:
    return [
        SimProc(
            ORPHAN_PID,
            1,
            "python3",
            ("python3", "finetune.py", "--model", "/models/Llama-3.1-8B", "--epochs", "3"),
            user="dana",
            uid=1010,
            gpu_mib={0: 12288},
            start_offset_s=70_000.0,
            rss_kib=5_200_000,
        ),
        SimProc(
            SURVIVOR_PID,
            1,
            "pt_data_worker",
            ("python3", "-m", "torch.utils.data.worker", "--worker-id", "0"),
            user="erik",
            uid=1011,
            start_offset_s=75_010.0,
            rss_kib=2_100_000,
        ),
        SimProc(
            6300,
            2950,
            "python3",
            ("python3", "train.py", "--config", "configs/vit-l.yaml"),
            user="gil",
            uid=1012,
            start_offset_s=78_000.0,
            rss_kib=1_600_000,
        ),
        SimProc(
            CHECKPOINT_PID,
            6300,
            "python3",
            ("python3", "save_ckpt.py", "--to", "/mnt/nfs/ckpt/vit-l"),
            user="gil",
            uid=1012,
            state="D",
            gpu_mib={2: 9000},
            start_offset_s=78_002.0,
            rss_kib=3_900_000,
        ),
        SimProc(
            STUCK_PID,
            2960,
            "python3",
            ("python3", "bench.py", "--iters", "1000"),
            user="hana",
            uid=1013,
            gpu_mib={3: 20480},
            start_offset_s=79_000.0,
            rss_kib=2_400_000,
        ),
        SimProc(
            EVAL_PID,
            2970,
            "python3",
            ("python3", "eval.py", "--suite", "mmlu"),
            user="fern",
            uid=1014,
            gpu_mib={5: 8192},
            start_offset_s=79_500.0,
            rss_kib=2_000_000,
            profiler={"tool": None, "via": protocol.VIA_UNREADABLE},
        ),
    ]


def state_since(pid: int, start_s: float) -> float | None:
    """Since when the collector has seen ``pid`` in its state (the checkpoint writer: D since 40 s before
    the host was opened)."""
    return start_s - 40.0 if pid == CHECKPOINT_PID else None


def waits(pid: int, start_s: float) -> tuple[ThreadWait, ...]:
    """The stuck threads of ``pid``, placed as the collector places them (from the kernel stack, as root)."""
    if pid != STUCK_PID:
        return ()
    return (ThreadWait(STUCK_TID, "D", "os_acquire_mutex", "nvidia", stack=True, since=start_s - 30.0),)


def xids(index: int, start_s: float) -> tuple[XidEvent, ...]:
    """GPU ``index``'s Xids this boot (an NVML event: without the kernel log there is no line to quote)."""
    if index != XID_GPU:
        return ()
    return (XidEvent(XID_APP, start_s - 900.0, "NVML event"),)


def kernel_log() -> KernelLogNote:
    return KernelLogNote(source=None, error=safe(KERNEL_LOG_ERROR))


def remembered(start_s: float) -> Remembered | None:
    """What the collector remembers: erik's job, ended by the scheduler, a worker and a segment left."""
    worker_ticks = int(75_010.0 * CLOCK_TICKS_PER_S)
    return Remembered.from_dict(
        {
            "since": BOOT_EPOCH_S + 600.0,
            "jobs_seen": 4,
            "jobs": [
                {
                    "root": TORCHRUN_PID,
                    "root_start": int(75_000.0 * CLOCK_TICKS_PER_S),
                    "name": "torchrun",
                    "user": "erik",
                    "first_seen": BOOT_EPOCH_S + 75_001.0,
                    "released": start_s - JOB_ENDED_BEFORE_S,
                    "gpus": [[1, 30_720], [6, 30_720], [7, 30_720]],
                    "segments": [SEGMENT],
                    "members_total": 6,
                    "remaining": [[SURVIVOR_PID, worker_ticks]],
                }
            ],
        }
    )
