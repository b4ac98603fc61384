"""The example alerting rules (``contrib/prometheus/gputui.rules.yml``) with Prometheus's own ``promtool``:
they load, and each alert fires on the series the exporter writes, after its ``for``, and not before."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

from tests.integration.procs import REPO

RULES = REPO / "contrib" / "prometheus" / "gputui.rules.yml"
PROMTOOL = shutil.which("promtool") or "/usr/bin/promtool"
HOST = {"Hostname": "gpu-a"}
GIB2 = 2 << 30


def _series(name: str, labels: dict[str, str], values: str) -> dict[str, str]:
    body = ",".join(f'{k}="{v}"' for k, v in {**HOST, **labels}.items())
    return {"series": f"{name}{{{body}}}", "values": values}


def _alert(at: str, name: str, alerts: list[dict[str, Any]]) -> dict[str, Any]:
    return {"eval_time": at, "alertname": name, "exp_alerts": alerts}


def test_the_rules_load() -> None:
    done = subprocess.run(
        [PROMTOOL, "check", "rules", str(RULES)], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "SUCCESS: 5 rules found" in done.stdout


def test_each_alert_fires_on_the_exporter_s_series(tmp_path: Path) -> None:
    defunct = {"kind": "defunct_leader", "pid": "40"}
    inputs = [
        _series("gputui_finding_memory_bytes", {"gpu": "0", "kind": "defunct_leader"}, f"{GIB2}x20"),
        _series("gputui_finding_process_memory_bytes", {**defunct, "gpu": "0"}, f"{GIB2}x20"),
        _series("gputui_finding_process_threads", {**defunct, "state": "D"}, "1x20"),
        _series("gputui_finding_process_state_since_timestamp_seconds", defunct, "0x20"),
        _series("gputui_findings", {"kind": "zombie"}, "1x20"),
        _series("gputui_server_state", {"port": "30000", "engine": "sglang", "state": "STALLED"}, "0 0 1x10"),
        _series("gputui_sample_age_seconds", {}, "1 1 1 100x10"),
    ]
    held = {"severity": "warning", "gpu": "0", "kind": "defunct_leader", **HOST}
    tests = [
        _alert("9m", "GpuMemoryHeldByDeadProcess", []),
        _alert(
            "12m",
            "GpuMemoryHeldByDeadProcess",
            [
                {
                    "exp_labels": held,
                    "exp_annotations": {
                        "summary": "gpu-a GPU0: 2GiB held (defunct_leader) for over 10 minutes",
                        "description": "Open the host with gputui (Enter in the fleet view) to see the "
                        "process and what to kill.",
                    },
                }
            ],
        ),
        _alert("9m", "GpuZombieNotReaped", []),
        _alert(
            "12m",
            "GpuZombieNotReaped",
            [
                {
                    "exp_labels": {"severity": "info", "kind": "zombie", **HOST},
                    "exp_annotations": {
                        "summary": "gpu-a: 1 zombie process(es) not reaped for over 10 minutes"
                    },
                }
            ],
        ),
        _alert("3m", "InferenceServerStalled", []),
        _alert(
            "5m",
            "InferenceServerStalled",
            [
                {
                    "exp_labels": {
                        "severity": "critical",
                        "port": "30000",
                        "engine": "sglang",
                        "state": "STALLED",
                        **HOST,
                    },
                    "exp_annotations": {"summary": "gpu-a: the sglang server on port 30000 is STALLED"},
                }
            ],
        ),
        _alert("9m", "GpuNeedsReset", []),
        _alert(
            "12m",
            "GpuNeedsReset",
            [
                {
                    "exp_labels": {"severity": "critical", "gpu": "0", **HOST},
                    "exp_annotations": {
                        "summary": "gpu-a GPU0 needs a reset (nvidia-smi -r) or a driver reload"
                    },
                }
            ],
        ),
        _alert("4m", "GputuiExporterStuck", []),
        _alert(
            "6m",
            "GputuiExporterStuck",
            [
                {
                    "exp_labels": {"severity": "warning", **HOST},
                    "exp_annotations": {"summary": "gpu-a: gputui's newest sample is 1m 40s old"},
                }
            ],
        ),
    ]
    document = {
        "rule_files": [str(RULES)],
        "evaluation_interval": "1m",
        "tests": [{"interval": "1m", "input_series": inputs, "alert_rule_test": tests}],
    }
    test_file = tmp_path / "gputui.rules.test.yml"
    test_file.write_text(json.dumps(document, indent=1))  # JSON is YAML
    done = subprocess.run(
        [PROMTOOL, "test", "rules", str(test_file)], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stdout + done.stderr
