"""The GPU's fitness in the driver's own words: NVIDIA's Xid Catalog row by row, real kernel-log lines, the
driver's recovery action first, the NVLink fabric, resets that clear, and GPUs the driver cannot reach."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

from gputui.agent.gpu.xid import KernelLog
from gputui.agent.pci import pci_key
from gputui.agent.protocol import UNREACHABLE_LOST, UNREACHABLE_RESET_REQUIRED, UNREACHABLE_TIMED_OUT
from gputui.core.model import CANNOT_TELL, NOT_READY, Gpu, GpuFitness, HostSnapshot, XidEvent
from gputui.core.verdict import Baselines, analyze, assess, headline
from gputui.core.verdict.fitness import (
    ACTION_DRAIN,
    ACTION_DRAIN_AND_RESET,
    ACTION_FABRIC,
    ACTION_INVESTIGATE,
    ACTION_NONE,
    ACTION_REBOOT,
    ACTION_RESET,
    ACTION_UNKNOWN_RECOVERY,
    RECOVERY_ACTIONS,
    fitness_findings,
    xid_action,
)

DATA = Path(__file__).resolve().parents[1] / "data"
KERNEL_LOGS = DATA / "kernel_log"

BUCKETS = {
    "RESTART_APP": ACTION_NONE,
    "IGNORE": ACTION_NONE,
    "RESET_GPU": ACTION_RESET,
    "WORKFLOW_XID_48": ACTION_RESET,
    "WORKFLOW_NVLINK_ERR": ACTION_RESET,
    "RESTART_BM": ACTION_REBOOT,
    "RESTART_VM": ACTION_REBOOT,
    "CHECK_MECHANICALS": ACTION_DRAIN,
    "CONTACT_SUPPORT": ACTION_INVESTIGATE,
    "CHECK_UVM": ACTION_INVESTIGATE,
    "UPDATE_SWFW": ACTION_INVESTIGATE,
}
"""How each immediate-action bucket of the catalogue folds into gputui's actions (the module docstring of
``gputui.core.verdict.fitness``). WORKFLOW_XID_45, WORKFLOW_NVLINK5_ERR and XID_154 are read from the line."""
FROM_THE_LINE = {"WORKFLOW_XID_45", "WORKFLOW_NVLINK5_ERR", "XID_154"}


def _catalogue() -> list[tuple[int, str, str, str]]:
    """(xid, mnemonic, description, immediate action) of every row of the catalogue's Xid table."""
    with (DATA / "xid" / "catalogue.csv").open() as handle:
        rows = [row for row in csv.reader(line for line in handle if not line.startswith("#"))]
    return [(int(xid), mnemonic, description, bucket) for xid, mnemonic, description, bucket in rows]


def test_every_catalogue_row_asks_for_its_immediate_action() -> None:
    """Every Xid the catalogue lists as in use is in the table with its bucket's action; an unused code, or
    one the catalogue gives no immediate action, is unclassified and blocks ("investigate")."""
    rows = _catalogue()
    assert len(rows) >= 170
    assert sorted(xid for xid, *_ in rows) == list(range(1, len(rows) + 1))
    for xid, mnemonic, description, bucket in rows:
        if bucket in FROM_THE_LINE:
            continue
        meaning, action, _advice = xid_action(XidEvent(xid, 1.0, "kernel log"))
        if description == "Unused" or not bucket:
            assert action == ACTION_INVESTIGATE, (xid, mnemonic)
            continue
        assert action == BUCKETS[bucket], (xid, mnemonic, bucket)
        assert not meaning.startswith("unclassified"), (xid, mnemonic)


def _events(name: str) -> dict[tuple[int, int, int], list[XidEvent]]:
    """Every Xid of one sample file, per GPU, as the collector would list it (oldest first)."""
    log = KernelLog(test_path=str(KERNEL_LOGS / name))
    log.read()
    assert log.error is None
    per_gpu: dict[tuple[int, int, int], list[XidEvent]] = {}
    for event in log.events:
        per_gpu.setdefault(event["pci"], []).append(
            XidEvent(event["xid"], event["time"], "kernel log", event["detail"])
        )
    return per_gpu


def test_fallen_off_the_bus_is_xid_79_in_each_form_the_field_writes() -> None:
    """With an Xid number, on a line of its own without one, and over three lines: each a reboot."""
    gpud = _events("gpud_kmsg.txt")
    sentinel = _events("nvsentinel_syslog_monitor.txt")
    threads = _events("issue_threads.txt")
    for per_gpu, pci in (
        (
            gpud,
            "0000:91:00",
        ),  # "NVRM: Xid (PCI:0000:91:00): 79, …" then "NVRM: GPU 0000:91:00.0: GPU has fallen …"
        (gpud, "0000:29:00"),  # the one-line form alone
        (
            gpud,
            "0000:18:00",
        ),  # "NVRM: The NVIDIA GPU 0000:18:00.0" … "fallen off the bus and is not responding"
        (sentinel, "0000:b3:00"),  # the three-line form with continuation indentation
        (threads, "0000:01:00"),  # the old "NVRM: GPU at 0000:01:00.0 has fallen off the bus."
    ):
        events = per_gpu[pci_key(pci)]
        assert [e.xid for e in events if e.xid == 79], pci
        judged = assess(GpuFitness(xids=tuple(events)))
        assert judged.action == ACTION_REBOOT, pci
    # The Xid line and the bare line that follows it are one event.
    assert [e.xid for e in gpud[pci_key("0000:91:00")]].count(79) == 1


def test_xid_154_is_read_by_its_code_and_the_newest_change_decides() -> None:
    per_gpu = _events("gpud_kmsg.txt")
    # GB200: NETIR_LINK_EVT Fatal (a reset), then the driver's action 0x0 -> 0x4 (Drain and Reset).
    judged = assess(GpuFitness(xids=tuple(per_gpu[pci_key("0009:01:00")])))
    assert judged.action == ACTION_DRAIN_AND_RESET
    assert any("GPU recovery action changed to Drain and Reset" in cause for cause in judged.causes)
    # 0x4 -> 0x1 later on the same GPU: the newest change is what the driver asks for now.
    later = assess(GpuFitness(xids=tuple(per_gpu[pci_key("0008:01:00")])))
    assert "Xid 154: GPU recovery action changed to GPU Reset" in later.causes
    assert all("Drain and Reset" not in cause for cause in later.causes)
    # Back to 0x0 (None): the change says nothing is needed.
    sentinel = _events("nvsentinel_syslog_monitor.txt")[pci_key("0008:01:00")]
    assert [e.xid for e in sentinel] == [154, 154]
    assert assess(GpuFitness(xids=tuple(sentinel))).action == ACTION_NONE
    # The words are the driver's and change between drivers: only the code counts.
    odd = XidEvent(154, 1.0, "kernel log", "GPU recovery action changed from 0x0 (None) to 0x1 (PF FLR)")
    assert xid_action(odd)[1] == ACTION_RESET
    unknown = XidEvent(154, 1.0, "kernel log", "GPU recovery action changed from 0x0 (None) to 0x9 (Later)")
    assert xid_action(unknown)[1] == ACTION_UNKNOWN_RECOVERY
    assert xid_action(XidEvent(154, 1.0, "kernel log", "garbled"))[1] == ACTION_INVESTIGATE


def test_nvlink5_xids_block_when_the_driver_says_fatal() -> None:
    per_gpu = _events("gpud_kmsg.txt")
    fatal = [
        e for events in per_gpu.values() for e in events if e.xid in range(144, 151) and " Fatal" in e.detail
    ]
    nonfatal = [
        e
        for events in per_gpu.values()
        for e in events
        if e.xid in range(144, 151) and "Nonfatal" in e.detail
    ]
    assert fatal
    assert nonfatal
    for event in fatal:
        meaning, action, _ = xid_action(event)
        assert action == ACTION_RESET, event.detail
        assert meaning.startswith("NVLink5 ")
    for event in nonfatal:
        assert xid_action(event)[1] == ACTION_NONE, event.detail
    with_pid = next(e for e in nonfatal if "name=" in e.detail)  # "145, pid=…, name=…, RLW_RXPIPE Nonfatal …"
    assert "RLW_" in xid_action(with_pid)[0]


def test_advisories_are_shown_with_their_advice_and_never_block() -> None:
    for xid in (94, 63, 92, 13, 31, 43):
        judged = assess(GpuFitness(xids=(XidEvent(xid, 1.0, "kernel log"),)))
        assert judged.action == ACTION_NONE
        assert len(judged.notes) == 1
        assert "; " in judged.notes[0]  # the advice
    assert "reset when convenient" in assess(GpuFitness(xids=(XidEvent(94, 1.0, "kernel log"),))).notes[0]
    # 109 is a reset (NVIDIA), not an application fault.
    assert assess(GpuFitness(xids=(XidEvent(109, 1.0, "kernel log"),))).action == ACTION_RESET


def test_an_unclassified_xid_blocks_unless_the_site_or_the_driver_accepts_it() -> None:
    fitness = GpuFitness(xids=(XidEvent(4242, 1.0, "kernel log"),))
    judged = assess(fitness)
    assert judged.action == ACTION_INVESTIGATE
    assert judged.causes[0].startswith("unclassified Xid 4242 since boot")
    assert "Xid Catalog" in judged.causes[0]
    accepted = assess(fitness, frozenset({4242}))
    assert accepted.action == ACTION_NONE
    assert accepted.notes == ("unclassified Xid 4242 since boot; accepted by the site's config",)
    driver_none = assess(GpuFitness(recovery_action=0, xids=fitness.xids))
    assert driver_none.action == ACTION_NONE
    assert driver_none.notes[0].endswith("; the driver asks for nothing")
    # The site's list reaches the verdict through the baselines.
    host = HostSnapshot(
        target="h", time=10.0, processes_time=10.0, gpus=(Gpu(index=0, memory_used_mib=3, fitness=fitness),)
    )
    assert analyze(host, Baselines()).verdict.level == NOT_READY  # type: ignore[union-attr]
    assert analyze(host, Baselines(accepted_xids=frozenset({4242}))).verdict.clean  # type: ignore[union-attr]


def test_the_driver_decides_and_the_xid_explains() -> None:
    dbe = XidEvent(
        48, 1_800_000_000.0, "kernel log", "An uncorrectable double bit error (DBE) has been detected"
    )
    judged = assess(GpuFitness(recovery_action=1, xids=(dbe,)))
    assert judged.action == ACTION_RESET
    (cause,) = judged.causes
    assert cause.startswith("Xid 48: double-bit ECC error at ")
    assert cause.endswith("; the driver asks for GPU Reset")
    # Every value the bindings name maps to an action; one they do not blocks.
    for code, (name, action) in RECOVERY_ACTIONS.items():
        assert assess(GpuFitness(recovery_action=code)).action == action, name
    assert assess(GpuFitness(recovery_action=2)).action == ACTION_REBOOT
    assert assess(GpuFitness(recovery_action=4)).needs_reset
    strange = assess(GpuFitness(recovery_action=77))
    assert strange.action == ACTION_UNKNOWN_RECOVERY
    assert strange.causes == ("the driver reports unknown recovery action 77",)
    # NONE from the driver: a reboot-class Xid is what happened, not what is needed.
    assert (
        assess(GpuFitness(recovery_action=0, xids=(XidEvent(79, 1.0, "kernel log"),))).action == ACTION_NONE
    )
    # The driver's action never hides NVML's own states.
    assert assess(GpuFitness(recovery_action=0, remap_pending=True)).action == ACTION_RESET


def test_resets_clear_what_they_clear() -> None:
    cleared = XidEvent(48, 10.0, "kernel log", cleared="GPU reset since")
    assert assess(GpuFitness(xids=(cleared,))).action == ACTION_NONE
    again = assess(GpuFitness(xids=(cleared, XidEvent(48, 50.0, "kernel log"))))
    assert again.action == ACTION_RESET
    assert again.causes == ("Xid 48: double-bit ECC error; recurred after a reset: investigate",)
    # A reset does not bring a GPU back onto the bus; a reload or a boot does.
    fallen = XidEvent(79, 10.0, "kernel log", cleared="GPU reset since")
    assert assess(GpuFitness(xids=(fallen,))).action == ACTION_REBOOT
    reloaded = XidEvent(79, 10.0, "kernel log", cleared="driver reloaded since")
    assert assess(GpuFitness(xids=(reloaded,))).action == ACTION_NONE


@pytest.mark.parametrize(
    ("state", "status", "manager", "blocks", "said"),
    [
        (3, 0, None, False, None),
        (2, 0, "not running", True, "NVLink fabric registration in progress (fabric manager not running)"),
        (1, 0, "running", True, "NVLink fabric registration not started (fabric manager running)"),
        (
            3,
            23,
            "running",
            True,
            "NVLink fabric registration failed: insufficient resources (fabric manager running)",
        ),
        (None, None, None, False, None),
    ],
)
def test_a_gpu_without_its_fabric_is_not_ready(
    state: int | None, status: int | None, manager: str | None, blocks: bool, said: str | None
) -> None:
    judged = assess(GpuFitness(fabric_state=state, fabric_status=status, fabric_manager=manager))
    assert judged.blocking is blocks
    if said is not None:
        assert judged.action == ACTION_FABRIC
        assert judged.causes == (said,)


def test_xid_45_never_blocks_the_fabric_state_judges_the_fabric() -> None:
    """The driver logs Xid 45 whenever an application using the GPU is stopped (a kill, Ctrl-C): shown with
    its advice, never blocking, fabric or not; NVML's fabric state says whether the fabric needs anything."""
    per_gpu = _events("gpud_kmsg.txt")
    (alone,) = per_gpu[pci_key("0000:61:00")]  # "45, pid=1496200, name=distprovers-gpu, Ch 0000000f"
    assert alone.xid == 45
    cleanup = (
        "Xid 45: preemptive cleanup: the driver cleaned up a stopped or failed application's work (a kill,"
        " Ctrl-C, or the Xid before it)"
    )
    on_fabric = assess(GpuFitness(fabric_state=3, fabric_status=0, xids=(alone,)))
    assert (on_fabric.action, on_fabric.causes) == (ACTION_NONE, ())
    assert on_fabric.notes == (
        f"{cleanup}; informational, the GPU is fit; its NVLink fabric state (read from NVML) says whether the"
        " fabric manager needs a restart",
    )
    off_fabric = assess(GpuFitness(xids=(alone,)))
    assert (off_fabric.action, off_fabric.notes) == (
        ACTION_NONE,
        (f"{cleanup}; informational, the GPU is fit",),
    )
    # A fabric that is not registered is NOT READY by its own state, Xid 45 or not.
    down = assess(GpuFitness(fabric_state=2, fabric_status=0, fabric_manager="not running", xids=(alone,)))
    assert down.action == ACTION_FABRIC
    assert down.causes == ("NVLink fabric registration in progress (fabric manager not running)",)
    # With another Xid that blocks, that one decides.
    with_149 = (XidEvent(149, 0.5, "kernel log", "NETIR Fatal XC0 i0 Link -1 (0x0)"), alone)
    assert assess(GpuFitness(fabric_state=3, fabric_status=0, xids=with_149)).action == ACTION_RESET
    # The real lines that cite the Xid before them (open-gpu-kernel-modules#1150): advisories too.
    threads = _events("issue_threads.txt")
    cited = [e for events in threads.values() for e in events if e.xid == 45]
    assert len(cited) == 7
    assert all(xid_action(e, fabric=True)[1] == ACTION_NONE for e in cited)


def test_the_unknown_recovery_hint_names_the_value_and_nvml_s_type() -> None:
    """One table, one wording: an action the driver asks for that gputui does not know is said as that,
    with its value, never as an Xid to look up in the catalogue or to accept in the config."""
    for fitness, value in (
        (GpuFitness(recovery_action=9), 9),
        (GpuFitness(xids=(XidEvent(154, 1.0, "kernel log", "changed from 0x0 (None) to 0xb (Later)"),)), 11),
    ):
        gpu = Gpu(index=3, memory_used_mib=3, fitness=fitness)
        (finding,) = fitness_findings(_host(gpu))
        assert finding.detail.startswith("GPU3 needs a recovery action gputui does not know (")
        assert finding.action == (
            f"the driver asks for an action gputui does not know (value {value}): see NVIDIA's NVML"
            " documentation of nvmlDeviceGpuRecoveryAction_t; GPU 3 counts as not ready until the driver's"
            " recovery action returns to None"
        )
    known = fitness_findings(_host(Gpu(index=3, memory_used_mib=3, fitness=GpuFitness(recovery_action=1))))
    assert [f.action for f in known] == [
        "reset the GPU (nvidia-smi -r -i 3, nothing may hold it) before the next launch"
    ]


def _host(*gpus: Gpu) -> HostSnapshot:
    return HostSnapshot(target="h", time=10.0, processes_time=10.0, gpus=gpus)


def test_a_gpu_the_driver_cannot_reach_is_a_fact_with_an_action() -> None:
    fine = Gpu(index=0, memory_used_mib=3)
    lost = Gpu(index=1, error="GPU is lost", unreachable=UNREACHABLE_LOST)
    verdict = analyze(_host(fine, lost), Baselines()).verdict
    assert verdict is not None
    assert verdict.known
    assert verdict.level == NOT_READY
    assert verdict.not_ready == ("GPU1 needs a reboot of the host (the driver says it is lost)",)
    reset = Gpu(index=1, error="NVML error: Reset Required", unreachable=UNREACHABLE_RESET_REQUIRED)
    assert analyze(_host(fine, reset), Baselines()).verdict.not_ready == (  # type: ignore[union-attr]
        "GPU1 needs a reset (NVML says a reset is required)",
    )
    # One GPU timing out is a GPU that could not be read this time: cannot tell.
    slow = Gpu(index=1, error="NVML call timed out", unreachable=UNREACHABLE_TIMED_OUT, timeouts_in_row=5)
    assert analyze(_host(fine, slow), Baselines()).verdict.level == CANNOT_TELL  # type: ignore[union-attr]
    # Every GPU timing out sample after sample is a wedged driver.
    wedged = [
        Gpu(index=i, error="NVML call timed out", unreachable=UNREACHABLE_TIMED_OUT, timeouts_in_row=2)
        for i in range(2)
    ]
    judged = analyze(_host(*wedged), Baselines()).verdict
    assert judged is not None
    assert judged.level == NOT_READY
    assert judged.not_ready[0] == (
        "GPU0 needs a reboot of the host (no NVML call on any GPU of the host returned, 2 samples in a row:"
        " the driver is wedged)"
    )
    once = [Gpu(index=i, error="t", unreachable=UNREACHABLE_TIMED_OUT, timeouts_in_row=1) for i in range(2)]
    assert analyze(_host(*once), Baselines()).verdict.level == CANNOT_TELL  # type: ignore[union-attr]


def test_hostile_unreachable_and_fabric_values_are_blanks() -> None:
    gpu = Gpu.from_dict({"index": 0, "unreachable": "melted", "timeouts_in_row": -4})
    assert gpu.unreachable is None
    assert gpu.timeouts_in_row == 0
    fitness = GpuFitness.from_dict(
        {"recovery_action": "one", "fabric_state": -1, "fabric_manager": "rm -rf", "read_time": float("nan")}
    )
    assert fitness is not None
    assert (fitness.recovery_action, fitness.fabric_state, fitness.fabric_manager, fitness.read_time) == (
        None,
        None,
        None,
        None,
    )


def test_at_baseline_is_said_of_memory_alone() -> None:
    """Four GPUs at 3 MiB, each needing a reset: "4/4 GPUs at baseline", NOT READY for their fitness. Memory
    held, or a GPU the driver lost, is not at baseline whatever else is said of it."""
    remap = GpuFitness(remap_pending=True)
    unfit = [Gpu(index=i, memory_used_mib=3, fitness=remap) for i in range(4)]
    verdict = analyze(_host(*unfit), Baselines()).verdict
    assert verdict is not None
    assert headline(verdict) == "NOT READY: 4/4 GPUs at baseline (3 MiB + 2)"
    held = Gpu(index=1, memory_used_mib=4099, fitness=remap)
    lost = Gpu(index=2, error="GPU is lost", unreachable=UNREACHABLE_LOST)
    mixed = analyze(_host(unfit[0], held, lost, unfit[3]), Baselines()).verdict
    assert mixed is not None
    assert headline(mixed) == "NOT READY: 2/4 GPUs at baseline (3 MiB + 2)"


def test_the_site_s_list_never_accepts_the_driver_s_recovery_action() -> None:
    """Xid 154 is the driver's recovery action in its log form: listed in ``accepted_xids`` it still blocks
    until the driver says None, a value gputui does not know included; the list still accepts real Xids."""
    accepted = frozenset({154, 48})
    reset = XidEvent(154, 1.0, "kernel log", "GPU recovery action changed from 0x0 (None) to 0x1 (GPU Reset)")
    judged = assess(GpuFitness(xids=(reset,)), accepted)
    assert judged.action == ACTION_RESET
    assert judged.causes == ("Xid 154: GPU recovery action changed to GPU Reset",)
    unknown = XidEvent(
        154, 2.0, "kernel log", "GPU recovery action changed from 0x1 (GPU Reset) to 0x9 (Later)"
    )
    assert assess(GpuFitness(xids=(reset, unknown)), accepted).action == ACTION_UNKNOWN_RECOVERY
    back = XidEvent(154, 3.0, "kernel log", "GPU recovery action changed from 0x9 (Later) to 0x0 (None)")
    assert assess(GpuFitness(xids=(reset, unknown, back)), accepted).action == ACTION_NONE
    dbe = assess(GpuFitness(xids=(XidEvent(48, 1.0, "kernel log"),)), accepted)
    assert (dbe.action, dbe.notes) == (
        ACTION_NONE,
        ("Xid 48: double-bit ECC error; accepted by the site's config",),
    )


def test_every_recovery_action_the_installed_bindings_name_is_known() -> None:
    """The values of ``nvmlDeviceGpuRecoveryAction_t`` that pynvml names (``NVML_GPU_RECOVERY_ACTION_*``) are
    each in the table under NVIDIA's name: a value added by a newer binding fails here, not in the field."""
    import pynvml

    named = {
        value: key.removeprefix("NVML_GPU_RECOVERY_ACTION_")
        for key, value in vars(pynvml).items()
        if key.startswith("NVML_GPU_RECOVERY_ACTION_") and isinstance(value, int)
    }
    assert named, "the installed pynvml names no recovery action"
    assert set(named) <= set(RECOVERY_ACTIONS), sorted(set(named) - set(RECOVERY_ACTIONS))
    for value, key in named.items():
        name, action = RECOVERY_ACTIONS[value]
        words = {
            "GPU_RESET": "GPU Reset",
            "RECOVER_IMEX_DOMAIN": "Recover IMEX Domain",
            "DRAIN_P2P": "Drain P2P",
        }
        assert name == words.get(key, key.replace("_", " ").title().replace(" And ", " and ")), (value, key)
        assert (action == ACTION_NONE) is (key == "NONE"), (value, key)


def test_each_driver_action_is_worded_as_nvidia_words_it_never_as_a_service_call() -> None:
    """Drain P2P: stop peer-to-peer work and UVM persistence, then check again; Drain and Reset: no new work,
    let the running work end, then reset. No value of the driver's asks for the GPU to be serviced."""
    hints = {}
    for code in RECOVERY_ACTIONS:
        if code == 0:
            continue
        gpu = Gpu(index=5, memory_used_mib=3, fitness=GpuFitness(recovery_action=code))
        (finding,) = fitness_findings(_host(gpu))
        hints[RECOVERY_ACTIONS[code][0]] = finding.action
        assert "serviced" not in finding.action, finding.action
        assert "RMA" not in finding.action, finding.action
        assert "serviced" not in finding.detail, finding.detail
        assert "RMA" not in finding.detail, finding.detail
    assert hints["Drain P2P"] == (
        "stop peer-to-peer traffic and UVM persistence on GPU 5, then check again: the driver then names the"
        " next step"
    )
    assert hints["Drain and Reset"] == (
        "start no new work on GPU 5, let the running work end, then reset it (nvidia-smi -r -i 5)"
    )
    assert hints["GPU Reset"].startswith("reset the GPU (nvidia-smi -r -i 5")
    assert hints["Node Reboot"].startswith("reboot the host")
