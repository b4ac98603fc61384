"""Real profiled jobs for the profiler tests: a process that is ``nsys profile …`` by its binary and argv,
and a job whose worker carries a profiler's injection in its environment.

``fake_nsys`` is a small C program named ``nsys`` (built with ``_procs.build_c_helper``): run as ``nsys
profile [options] APP [args]`` it reads its options the way nsys does (every option takes a value), writes
the raw stream a collecting nsys keeps beside its output (``OUTPUT.qdstrm``, never the ``.nsys-rep``: it is
never let finish; with ``FAKE_NSYS_TEMP`` set, ``nsys-report-PID.qdstrm`` in that folder, as nsys does since
2024), starts APP as its child and stays its parent until it is killed. ``/proc`` then shows what
it shows of a real ``nsys profile``: the binary's path in argv[0], comm ``nsys``, the application below.

Each process reports itself as a JSON line on stdout (``{"role", "pid"}``); ``_procs.Binary`` and
``_procs.Script`` read those and kill the whole session on the way out.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from tests.integration._procs import Binary, Script, build_c_helper

FAKE_NSYS_C = r"""
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int main(int argc, char **argv)
{
    const char *output = NULL;
    int at = 2;
    char path[4096];

    /* nsys SUBCOMMAND [options] APP ...: every option takes a value (--name=value, --name value, -x v). */
    while (at < argc && argv[at][0] == '-') {
        const char *arg = argv[at];
        const char *value;
        int step;
        if (arg[1] == '-' && strchr(arg, '=') != NULL) {
            value = strchr(arg, '=') + 1;
            step = 1;
        } else if (arg[1] != '-' && arg[2] != '\0') {
            value = arg + 2;
            step = 1;
        } else {
            value = at + 1 < argc ? argv[at + 1] : "";
            step = 2;
        }
        if (strncmp(arg, "-o", 2) == 0 || strncmp(arg, "--output", 8) == 0)
            output = value;
        at += step;
    }
    if (output != NULL) {
        int fd;
        /* Nsight Systems from 2024 on collects into its own temporary stream, and turns it into OUTPUT at
         * the end: "Generating '/var/tmp/nsys-report-4279.qdstrm'" (FAKE_NSYS_TEMP names the folder). */
        if (getenv("FAKE_NSYS_TEMP") != NULL)
            snprintf(path, sizeof path, "%s/nsys-report-%d.qdstrm", getenv("FAKE_NSYS_TEMP"), (int)getpid());
        else
            snprintf(path, sizeof path, "%s.qdstrm", output);
        fd = open(path, O_CREAT | O_WRONLY | O_TRUNC, 0644);
        if (fd >= 0) {
            if (write(fd, "QDSTRM raw event stream\n", 24) != 24)
                return 1;
            close(fd);
        }
    }
    printf("{\"role\": \"nsys\", \"pid\": %d}\n", (int)getpid());
    fflush(stdout);
    if (at < argc && fork() == 0) {
        execvp(argv[at], argv + at);
        _exit(127);
    }
    for (;;)
        pause();
}
"""

WORKER = r"""
import json, os, sys, time
os.write(1, (json.dumps({"role": sys.argv[1], "pid": os.getpid()}) + "\n").encode())
time.sleep(600)
"""

# A launcher that starts its worker with one more variable in the worker's environment (nothing in its own).
LAUNCHER = r"""
import json, os, sys, time
env = dict(os.environ)
if sys.argv[1]:
    key, _, value = sys.argv[1].partition("=")
    env[key] = value
argv = [sys.executable, "-S", "-c", sys.argv[2], "worker"]
os.posix_spawn(sys.executable, argv, env)
os.write(1, (json.dumps({"role": "launcher", "pid": os.getpid()}) + "\n").encode())
time.sleep(600)
"""

NSYS_INSTALL = "/opt/nvidia/nsight-systems/2024.5.1/target-linux-x64"
"""Where a real install keeps ``libToolsInjection64.so``: what nsys puts in the variables it sets."""


def build_fake_nsys(out_dir: Path) -> Path:
    """Compile the stand-in into ``out_dir/nsys``; returns the binary."""
    return build_c_helper(out_dir, "nsys", FAKE_NSYS_C)


@contextmanager
def nsys_job(binary: Path, *options: str) -> Iterator[Binary]:
    """``nsys profile OPTIONS python -c WORKER worker`` running: ``pids["nsys"]``, ``pids["worker"]``."""
    argv = ["profile", *options, sys.executable, "-S", "-c", WORKER, "worker"]
    running = Binary(binary, ["nsys", "worker"], argv)
    try:
        yield running
    finally:
        running.kill()


@contextmanager
def injected_job(variable: str) -> Iterator[Script]:
    """A launcher whose worker has ``variable`` ("KEY=VALUE") in its environment: ``pids["launcher"]``,
    ``pids["worker"]``."""
    running = Script(LAUNCHER, ["launcher", "worker"], argv_extra=[variable, WORKER])
    try:
        yield running
    finally:
        running.kill()
