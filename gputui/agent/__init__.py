"""The collector: GPU figures, the process trees that hold GPU memory, health probes and the kill executor.

A package that imports nothing outside the standard library (pynvml and psutil when the host has them) and
runs on Python 3.8 or newer. It runs in-process for the local host (``gputui.transports.local``) and is
shipped over SSH for remote hosts (``gputui.transports.ssh.bundle``: its modules, and the client's own pynvml,
served by a small importer in the remote ``python3``, nothing installed there). It never imports the client.

* ``protocol``: versions, command, stage, result, state and mode names, and the snapshot and health shapes;
* ``wire``, ``textpolicy``: the caps on what one line may carry, and the one text policy;
* ``collector`` (``Agent``), ``answers``, ``args``: one host's snapshots, the answers to commands, and the
  rules their arguments follow;
* ``calls``: bounded calls on worker threads;
* ``gpu/`` (``nvml``, ``smi``, ``none`` behind one interface): the device;
* ``proc/``: /proc, the job rule, the one tree walk, the live threads of a defunct leader, listening ports,
  the process sampler;
* ``kill/``: a confirmed kill run to its end here (identity guard, signals, outcomes, the kill messages);
* ``servers/``: inference-server endpoint probes from the GPU host itself, discovery of launchers' endpoints;
* ``remote/``: the stdio form (``session``, ``serve``; ``__main__`` runs it) and ``boot``, the remote
  importer of the shipped bundle.

Importing this package imports none of its modules: each is loaded when used, so a host that probes
nothing never loads the HTTP client, and one in NVML mode never loads the nvidia-smi backend.
"""

SHIPPED_AS_SOURCE = (
    "servers.http",
    "servers.probe",
    "servers.metrics_filter",
    "gpu.smi",
    "gpu.smiparse",
    "gpu.none",
    "gpu.probe",
    "proc.threads",
)
"""Modules most hosts never import (the HTTP client of the probes, the metrics filter, the nvidia-smi backend,
the readiness probe, the threads of a defunct leader): the bundle carries them as source only, for the remote
python to compile on first import."""
