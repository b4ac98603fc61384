"""The remote command line and the shipped bundle: fixed text and validated numbers on the command line, the
collector's package on stdin, served by the remote python's own import system (no sshd needed)."""

from __future__ import annotations

import importlib.util
import json
import marshal
import os
import re
import shlex
import subprocess
import sys
import threading
import time
import zlib
from pathlib import Path

import pytest

from gputui.agent.protocol import MODE_NVML
from gputui.core.link import LinkError, LinkOptions
from gputui.core.model import replace
from gputui.transports.ssh import bundle, remote_command_line
from gputui.transports.ssh.bundle import Bundle, bundle_for, bundle_of_source, collector_modules, loader
from tests.fakenvml.plugin import FakeNvml
from tests.interpreters import python38

LOADER = re.compile(
    r"^python3 -u -c 'import sys;sys\.version_info>=\(3,8\) or \(sys\.stderr\.write\("
    r"\"gputui-python-too-old %d\.%d\.%d\\n\"%tuple\(sys\.version_info\[:3\]\)\),sys\.exit\(125\)\);"
    r"import zlib,marshal;i=sys\.stdin\.buffer;g=\{\"__name__\":\"gputui-boot\"\};"
    r"s=i\.read\((\d+)\);c=i\.read\((\d+)\);"
    r"m=bytes\(getattr\(sys\.modules\.get\(\"_frozen_importlib_external\"\),\"MAGIC_NUMBER\",b\"\"\)\)\.hex\(\);"
    r"exec\(marshal\.loads\(zlib\.decompress\(c\)\) if m==\"([0-9a-f]+)\" else "
    r"compile\(zlib\.decompress\(s\),\"gputui-boot\",\"exec\"\),g\);"
    r"g\[\"boot\"\]\(i,(\d+),(\d+),\"([0-9a-f]+)\"\)'"
    r" --interval [0-9.e+-]+ --process-interval [0-9.e+-]+ --elide-unchanged( --read-only)?( --no-discover)?$"
)
PAYLOAD = Bundle(b"b" * 321, b"c" * 99, b"x" * 12345, b"y" * 678, "a70d0d0a")


def test_command_holds_only_fixed_text_and_numbers() -> None:
    hostile = LinkOptions(
        memory_interval_s=0.25,
        process_interval_s=2,
        read_only=True,
        discover_health=False,
        health_urls=("http://x/$(touch /tmp/pwned)", "http://y/`id`;rm -rf ~"),
        extra={"anything": "'; touch /tmp/pwned; '"},
    )
    command = remote_command_line(PAYLOAD, hostile)
    match = LOADER.fullmatch(command)
    assert match is not None, command
    assert match.groups()[:6] == ("321", "99", "a70d0d0a", "12345", "678", "a70d0d0a")
    assert shlex.split(command)[5:] == [
        "0.25",
        "--process-interval",
        "2.0",
        "--elide-unchanged",
        "--read-only",
        "--no-discover",
    ]
    assert "pwned" not in command
    assert "$" not in command
    assert "`" not in command


@pytest.mark.parametrize("bad", [0.0, -1.0, float("inf"), float("nan")])
def test_bad_intervals_never_reach_the_command(bad: float) -> None:
    with pytest.raises(LinkError, match="positive number"):
        remote_command_line(PAYLOAD, LinkOptions(memory_interval_s=bad))
    with pytest.raises(LinkError, match="positive number"):
        remote_command_line(PAYLOAD, LinkOptions(process_interval_s=bad))


def test_an_empty_bundle_or_an_odd_magic_never_reaches_the_command() -> None:
    with pytest.raises(LinkError, match="empty"):
        bundle_for(b"")
    with pytest.raises(LinkError, match="empty"):
        remote_command_line(replace(PAYLOAD, sources=b""), LinkOptions())
    with pytest.raises(LinkError, match="magic"):
        remote_command_line(replace(PAYLOAD, magic_hex="a7'; id; '"), LinkOptions())


def test_the_bundle_is_the_collector_package_and_the_clients_pynvml() -> None:
    payload = bundle_for()
    entry, modules, fallbacks = marshal.loads(payload.sources)  # noqa: S302
    assert entry == "gputui.agent.__main__"
    assert fallbacks == ("pynvml",)
    package = Path(bundle.gputui.agent.__file__).parent
    shipped = {name for name in modules if name.startswith("gputui.agent")}
    on_disk = {
        ".".join(("gputui", "agent", *p.relative_to(package).with_suffix("").parts)).removesuffix(".__init__")
        for p in package.rglob("*.py")
    }
    assert shipped == on_disk - {"gputui.agent.remote.boot"}
    assert modules["gputui"][:2] == (True, "<gputui-bundle>/gputui/__init__.py")
    assert zlib.decompress(modules["gputui"][2]) == b""  # not the client's package
    pynvml_spec = importlib.util.find_spec("pynvml")
    assert pynvml_spec is not None
    assert pynvml_spec.origin is not None
    assert zlib.decompress(modules["pynvml"][2]) == Path(pynvml_spec.origin).read_bytes()
    assert modules["gputui.agent.kill.operation"][1] == "<gputui-bundle>/gputui/agent/kill/operation.py"
    codes = marshal.loads(payload.codes)  # noqa: S302 - our own bytes
    # Compiled here for a remote python of this one's version: what every host imports, the shipped pynvml
    # (most remote pythons have none of their own) included, not what few hosts import.
    assert {"gputui.agent.collector", "pynvml"} <= set(codes)
    assert not {"gputui.agent.servers.http", "gputui.agent.gpu.smi"} & set(codes)
    kill_code = marshal.loads(zlib.decompress(codes["gputui.agent.kill.operation"]))  # noqa: S302 - one by one
    assert kill_code.co_filename == "<gputui-bundle>/gputui/agent/kill/operation.py"
    assert payload.magic_hex == importlib.util.MAGIC_NUMBER.hex()
    assert zlib.decompress(payload.boot_zlib) == (package / "remote" / "boot.py").read_bytes()
    match = LOADER.fullmatch(remote_command_line(payload, LinkOptions()))
    assert match is not None
    sizes = match.groups()[:2] + match.groups()[3:5]
    assert sum(int(size) for size in sizes) == len(payload.data)
    assert match.group(3) == match.group(6) == payload.magic_hex


def _run(
    payload: Bundle,
    *args: str,
    python: str = sys.executable,
    env: dict[str, str] | None = None,
    stdin_rest: bytes = b"rest of stdin",
) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        [python, "-u", "-c", loader(payload), *args],
        input=payload.data + stdin_rest,
        capture_output=True,
        timeout=120,
        cwd="/",
        env=env,
    )


STAND_IN = b"""
import sys
print(__name__, __package__ == '', repr(sys.stdin.buffer.read()), sys.argv[1:])
"""


def test_a_stand_in_collector_runs_as_main_and_gets_the_rest_of_stdin_and_its_arguments() -> None:
    done = _run(bundle_of_source(STAND_IN), "--interval", "2")
    assert done.returncode == 0, done.stderr.decode(errors="replace")
    assert done.stdout.decode() == "__main__ True b'rest of stdin' ['--interval', '2']\n"


RAISES = b"""
def inner():
    raise RuntimeError("bang")
inner()
"""


def test_a_traceback_names_the_shipped_module_and_shows_its_line() -> None:
    for payload in (bundle_of_source(RAISES), replace(bundle_of_source(RAISES), magic_hex="00000000")):
        done = _run(payload)
        assert done.returncode == 1
        err = done.stderr.decode()
        assert 'File "<gputui-bundle>/gputui_collector.py", line 3, in inner' in err, err
        assert 'raise RuntimeError("bang")' in err  # the source line, served by the finder
        assert "RuntimeError: bang" in err


def _once(python: str, env: dict[str, str], magic: str | None = None) -> dict[str, object]:
    payload = bundle_for()
    if magic is not None:
        payload = replace(payload, magic_hex=magic)
    done = _run(payload, "--once", "--no-discover", python=python, env=env, stdin_rest=b"")
    assert done.returncode == 0, done.stderr.decode(errors="replace")
    return json.loads(done.stdout)


def test_the_collector_runs_from_the_bundle_with_code_or_from_source(fake_nvml: FakeNvml) -> None:
    """The same snapshot whether the remote python runs the shipped code or compiles the sources."""
    env = fake_nvml.env()
    with_code = _once(sys.executable, env)
    compiled_there = _once(sys.executable, env, magic="00000000")
    for snapshot in (with_code, compiled_there):
        assert snapshot["mode"] == MODE_NVML
        assert len(snapshot["gpus"]) == 8  # type: ignore[arg-type]


def test_python38_runs_the_collector_from_source_with_the_shipped_pynvml(
    fake_nvml: FakeNvml, tmp_path: Path
) -> None:
    """The oldest python the collector supports, with no pynvml of its own: the bundle's is used."""
    python = python38()
    assert subprocess.run([python, "-c", "import pynvml"], capture_output=True, timeout=60).returncode != 0
    snapshot = _once(python, fake_nvml.env())
    assert snapshot["mode"] == MODE_NVML
    gpus = snapshot["gpus"]
    assert isinstance(gpus, list)
    assert len(gpus) == 8
    assert all(gpu["memory_total_mib"] for gpu in gpus)


FINDS_PYNVML = b"""
import pynvml, sys
spec = pynvml.__spec__
print(getattr(spec.loader, "bundled", False), spec.origin)
"""


def test_the_shipped_pynvml_is_served_only_to_a_python_without_one(tmp_path: Path) -> None:
    modules = collector_modules()
    modules["gputui_collector"] = (False, "<gputui-bundle>/gputui_collector.py", FINDS_PYNVML)
    payload = bundle.build(modules, "gputui_collector", bundle.boot_source())
    served = _run(payload, python=python38())
    assert served.returncode == 0, served.stderr.decode(errors="replace")
    assert served.stdout.decode() == "True <gputui-bundle>/pynvml.py\n"
    own = tmp_path / "own"
    own.mkdir()
    (own / "pynvml.py").write_text("# the host's own bindings\n")
    installed = _run(payload, python=python38(), env=dict(os.environ, PYTHONPATH=str(own)))
    assert installed.returncode == 0, installed.stderr.decode(errors="replace")
    assert installed.stdout.decode() == f"False {own / 'pynvml.py'}\n"


def test_reduced_command_is_valid_sh_with_only_fixed_text() -> None:
    from gputui.transports.ssh import reduced_command

    command = reduced_command("0123456789abcdef", LinkOptions(memory_interval_s=0.5))
    words = shlex.split(command)
    assert words[:2] == ["sh", "-c"]
    assert len(words) == 3
    checked = subprocess.run(["sh", "-n", "-c", words[2]], capture_output=True, text=True, timeout=30)
    assert checked.returncode == 0, checked.stderr
    assert "sleep 0.5 " in words[2]
    for bad in ("", "XYZ", "abc'; touch /tmp/x", "0123456789abcdeg"):
        with pytest.raises(LinkError):
            reduced_command(bad, LinkOptions())


def test_reduced_process_selection() -> None:
    from gputui.transports.ssh.reduced import reduced_processes

    ps_lines = [
        "    1     0 Ss   root     /sbin/init",
        "  100     1 Ss   alice    bash",
        "  200   100 Sl   alice    python -m sglang.launch_server --tp 8",
        "  201   200 Sl   alice    python scheduler worker",
        "  202   200 Z    alice    [python] <defunct>",
        "  203   201 S    alice    python scheduler helper",
        "  300     1 S    bob      unrelated editor",
        "  400     1 D    bob      stuck in io",
        "garbage line",
    ]
    rows = {row["pid"]: row for row in reduced_processes(ps_lines, {201: {0: 1000}, 999: {1: 5}})}
    assert sorted(rows) == [100, 200, 201, 202, 203, 400, 999]
    assert rows[201]["gpu_memory_mib"] == {"0": 1000}
    assert rows[200]["cmdline"] == ["python", "-m", "sglang.launch_server", "--tp", "8"]
    assert rows[202]["state"] == "Z"
    assert rows[999] == {"pid": 999, "gpu_memory_mib": {"1": 5}}


def test_links_opening_at_once_share_one_bundle_build(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """A fleet's links open together: the bundle is built once, and every link gets that same object."""
    monkeypatch.setattr(bundle, "_collector", None)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    builds: list[int] = []
    real_build = bundle.build

    def counting(*args: object, **kwargs: object) -> Bundle:
        builds.append(1)
        return real_build(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(bundle, "build", counting)
    barrier = threading.Barrier(8)
    built: list[Bundle] = []

    def open_one() -> None:
        barrier.wait()
        built.append(bundle_for())

    threads = [threading.Thread(target=open_one) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert len(built) == 8
    assert all(payload is built[0] for payload in built)
    assert builds == [1]


def test_the_next_process_takes_the_bundle_from_the_cache(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Built once per installed version: a later process reads it back instead of compiling again, and a
    damaged cache file is rebuilt, never shipped."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.setattr(bundle, "_collector", None)
    first = bundle_for()
    (cached,) = (tmp_path / "gputui").glob("bundle-*.bin")
    monkeypatch.setattr(bundle, "_collector", None)
    monkeypatch.setattr(bundle, "build", lambda *args: pytest.fail("rebuilt although cached"))
    monkeypatch.setattr(bundle, "collector_modules", lambda *args: pytest.fail("sources read, though cached"))
    assert bundle_for() == first
    data = bytearray(cached.read_bytes())
    data[-1] ^= 0xFF
    cached.write_bytes(bytes(data))
    monkeypatch.setattr(bundle, "_collector", None)
    monkeypatch.undo()
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.setattr(bundle, "_collector", None)
    assert bundle_for() == first  # rebuilt: the damaged copy is not used
    assert cached.read_bytes() != bytes(data)


def test_a_rewritten_module_file_is_a_new_cache_key(tmp_path: Path) -> None:
    """The cache is keyed by what ``os.stat`` says of each file: a rewrite moves the change time even when the
    size and the modification time are put back as they were, so an upgraded collector is never served from
    the bundle of the one before it. A fallback module that is gone is left out, as the bundle leaves it."""
    module = tmp_path / "probe.py"
    module.write_bytes(b"x = 1\n")
    files = {"gputui.agent.probe": (False, module)}
    key = bundle.cache_key(files, bundle.ENTRY)
    assert bundle.cache_key(files, bundle.ENTRY) == key  # nothing changed: the same key
    before = os.stat(module)
    time.sleep(0.01)
    module.write_bytes(b"x = 2\n")
    os.utime(module, ns=(before.st_atime_ns, before.st_mtime_ns))
    assert bundle.cache_key(files, bundle.ENTRY) != key
    assert bundle.cache_path(bundle.cache_key(files, bundle.ENTRY)) != bundle.cache_path(key)
    gone = dict(files, pynvml=(False, tmp_path / "missing" / "pynvml.py"))
    assert bundle.cache_key(gone, bundle.ENTRY) == bundle.cache_key(files, bundle.ENTRY)
    with pytest.raises(bundle.BundleError, match="cannot read the collector's modules"):
        bundle.cache_key({"gputui.agent.gone": (False, tmp_path / "gone.py")}, bundle.ENTRY)
