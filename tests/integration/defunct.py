"""A real defunct thread-group leader with a live thread, and a true zombie beside it.

``defunct_leader`` is a small C program (built with ``_procs.build_c_helper``): it forks a child that exits
at once and is never reaped (a true zombie: no live thread), starts a worker thread and then ends its main
thread with ``pthread_exit``. The leader is then in state Z (``ps`` shows ``<defunct>``) while the process
lives on in its worker. With ``vfork`` the worker then calls ``vfork()`` and waits in the kernel, state D,
until the vfork child (which sleeps) exits: the shape of a scheduler whose leader is gone and whose
remaining thread is stuck in the driver, without a driver.

Each process reports itself as a JSON line on stdout (``leader``, ``zombie``, ``worker``: the worker's
thread id). The ``Binary`` wrapper kills the whole process group on the way out (SIGKILL ends a vfork wait).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from tests.integration._procs import Binary, build_c_helper

DEFUNCT_LEADER_C = r"""
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

static int use_vfork;
static int ready[2];

static void *worker(void *arg)
{
    (void)arg;
    printf("{\"role\": \"worker\", \"pid\": %ld}\n", (long)syscall(SYS_gettid));
    fflush(stdout);
    if (write(ready[1], "x", 1) != 1)
        return NULL;
    /* The vfork parent (this thread) waits in the kernel, state D, until the child execs or exits. */
    if (use_vfork && vfork() == 0) {
        sleep(600);
        _exit(0);
    }
    for (;;)
        sleep(600);
    return NULL;
}

int main(int argc, char **argv)
{
    pthread_t thread;
    char byte;
    pid_t zombie;

    use_vfork = argc > 1 && strcmp(argv[1], "vfork") == 0;
    printf("{\"role\": \"leader\", \"pid\": %d}\n", (int)getpid());
    fflush(stdout);
    zombie = fork();
    if (zombie == 0)
        _exit(0); /* never waited for: a true zombie */
    printf("{\"role\": \"zombie\", \"pid\": %d}\n", (int)zombie);
    fflush(stdout);
    if (pipe(ready) != 0 || pthread_create(&thread, NULL, worker, NULL) != 0)
        return 1;
    if (read(ready[0], &byte, 1) != 1)
        return 1;
    pthread_exit(NULL); /* the leader ends; the process lives on in its worker */
}
"""

ROLES = ("leader", "zombie", "worker")


def build_defunct_leader(out_dir: Path) -> Path:
    """Compile the program into ``out_dir``; returns the binary."""
    return build_c_helper(out_dir, "defunct_leader", DEFUNCT_LEADER_C, ["-pthread"])


@contextmanager
def defunct_leader(binary: Path, vfork: bool = False) -> Iterator[Binary]:
    """The program running (its worker in D when ``vfork``); its pids by role in ``.pids``."""
    running = Binary(binary, ROLES, ["vfork" if vfork else "sleep"])
    try:
        yield running
    finally:
        running.kill()
