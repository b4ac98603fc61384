"""A host to plan GPU resets on: stand-in device files, a fake ``nvidia-smi`` recording its argv, holders.

The device nodes are plain files in a temp folder (``GPUTUI_TEST_DEVICE_PREFIX`` points the collector at
them); the fake NVML keeps ``<prefix>0`` open while it is initialised (``FAKE_NVML_DEVICE``), as the driver
keeps /dev/nvidia0 open, so a collector that did not let go is a real holder. The fake ``nvidia-smi``
appends each argv as a JSON line to a log, turns persistence mode off and on in the fake NVML's state file
(``-pm``), answers ``--query-gpu`` from that file (a host where NVML cannot be loaded), and refuses ``-r``
with "In use by another client" while any process still has a device file open, as the real one does.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.fakenvml import FakeGpu, FakeNvmlState
from tests.integration._procs import REPO

FAKE_SMI = r"""#!@PYTHON@
import json, os, re, sys, time
argv = sys.argv[1:]
with open(@LOG@, "a") as log:
    log.write(json.dumps(argv) + "\n")
prefix = @PREFIX@
if os.environ.get("FAKE_SMI_FAIL") and os.environ["FAKE_SMI_FAIL"] in argv:
    print("failed on purpose"); sys.exit(3)
if "-pm" in argv:
    mode = argv[argv.index("-pm") + 1]
    uuid = argv[argv.index("-i") + 1]
    path = os.environ["FAKE_NVML_STATE"]
    text = open(path).read()
    lines = [re.sub(r"persistence=[01]", "persistence=" + mode, line) if "uuid=" + uuid + " " in line + " "
             else line for line in text.splitlines()]
    tmp = path + ".smi"
    with open(tmp, "w") as out:
        out.write("\n".join(lines) + "\n")
    os.replace(tmp, path)
    print("Persistence mode set for GPU " + uuid); sys.exit(0)
if "-r" in argv:
    time.sleep(float(os.environ.get("FAKE_SMI_RESET_S") or 0))
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            fds = os.listdir("/proc/%s/fd" % pid)
        except OSError:
            continue
        for fd in fds:
            try:
                link = os.readlink("/proc/%s/fd/%s" % (pid, fd))
            except OSError:
                continue
            if link.startswith(prefix):
                print("GPU reset couldn't run because GPU is In use by another client (pid %s)" % pid)
                sys.exit(255)
    print("GPU reset successfully"); sys.exit(0)
if any(a.startswith("--query-gpu") for a in argv):
    # index, uuid, persistence_mode, display_active, mig.mode.current, mig.mode.pending
    words = {"1": "Enabled", "0": "Disabled"}
    for line in open(os.environ["FAKE_NVML_STATE"]).read().splitlines():
        if line.startswith("gpu "):
            keys = dict(part.split("=", 1) for part in line.split()[2:] if "=" in part)
            print(", ".join([line.split()[1], keys.get("uuid", ""), words[keys.get("persistence", "1")],
                             words[keys.get("display_active", "0")], "[N/A]", "[N/A]"]))
    sys.exit(0)
sys.exit(0)
"""


def uuid_of(index: int) -> str:
    return f"GPU-5e7e0000-0000-4000-8000-{index:012x}"


@dataclass
class ResetHost:
    root: Path
    state: FakeNvmlState
    env: dict[str, str]

    @property
    def prefix(self) -> str:
        return str(self.root / "dev" / "nvidia")

    @property
    def smi_log(self) -> Path:
        return self.root / "smi.jsonl"

    @property
    def audit(self) -> Path:
        return self.root / "state" / "gputui" / "audit.jsonl"

    def write(self) -> None:
        self.state.write(Path(self.env["FAKE_NVML_STATE"]))

    def smi_calls(self) -> list[list[str]]:
        if not self.smi_log.exists():
            return []
        return [json.loads(line) for line in self.smi_log.read_text().splitlines()]

    def persistence(self) -> list[str]:
        text = Path(self.env["FAKE_NVML_STATE"]).read_text()
        return [line.split("persistence=")[1][0] for line in text.splitlines() if line.startswith("gpu ")]

    def without_smi(self) -> dict[str, str]:
        bare = self.root / "bare"
        bare.mkdir(exist_ok=True)
        return dict(self.env, PATH=str(bare) + os.pathsep + os.path.dirname(sys.executable))

    def run(self, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "gputui.cli", "reset", *args],
            cwd=REPO,
            env=env or self.env,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )

    def plan_json(self, *args: str) -> tuple[int, dict[str, Any]]:
        done = self.run("--json", *args)
        assert done.stdout, done.stderr
        return done.returncode, json.loads(done.stdout)["plan"]


def make_reset_host(root: Path, lib_dir: Path, gpus: int = 2, **gpu_kwargs: Any) -> ResetHost:
    (root / "dev").mkdir(parents=True)
    for name in [f"nvidia{i}" for i in range(gpus)] + ["nvidiactl", "nvidia-uvm"]:
        (root / "dev" / name).write_bytes(b"")
    bin_dir = root / "bin"
    bin_dir.mkdir()
    smi = bin_dir / "nvidia-smi"
    text = FAKE_SMI.replace("@PYTHON@", sys.executable).replace("@LOG@", repr(str(root / "smi.jsonl")))
    smi.write_text(text.replace("@PREFIX@", repr(str(root / "dev"))))
    smi.chmod(0o755)
    state = FakeNvmlState(gpus=[FakeGpu(uuid=uuid_of(i), **gpu_kwargs) for i in range(gpus)])
    for gpu in state.gpus:
        if gpu.persistence is None:
            gpu.persistence = True
    state_path = root / "fakenvml.state"
    env = dict(os.environ)
    env.update(
        LD_LIBRARY_PATH=str(lib_dir),
        FAKE_NVML_STATE=str(state_path),
        FAKE_NVML_DEVICE=str(root / "dev" / "nvidia0"),
        GPUTUI_TEST_DEVICE_PREFIX=str(root / "dev" / "nvidia"),
        PATH=str(bin_dir) + os.pathsep + env.get("PATH", ""),
        XDG_STATE_HOME=str(root / "state"),
        XDG_CONFIG_HOME=str(root / "config"),
        HOME=str(root / "home"),
    )
    env.pop("FAKE_SMI_FAIL", None)
    host = ResetHost(root, state, env)
    host.write()
    return host


def holder_code(path: str, uid: int | None = None) -> str:
    """A process that keeps ``path`` open and says so (a job holding /dev/nvidiaN); with ``uid``, it then
    becomes that user (as a job started by root for another user would be)."""
    drop = "" if uid is None else f"os.setgroups([]); os.setgid({uid}); os.setuid({uid})\n"
    return (
        "import json, os, time\n"
        f"fd = os.open({path!r}, os.O_RDONLY)\n"
        + drop
        + 'os.write(1, (json.dumps({"role": "holder", "pid": os.getpid()}) + "\\n").encode())\n'
        "time.sleep(600)\n"
    )
