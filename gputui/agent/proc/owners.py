"""Whose job a process is: a Slurm step, a Kubernetes pod, a container, a systemd unit, or its user.

Read from ``/proc/<pid>/cgroup`` (v1 and v2: every hierarchy's path is looked at) and, where the collector may
read it, a few named variables of ``/proc/<pid>/environ`` (``OWNER_ENV_NAMES``; nothing else of the
environment is kept, and none of it leaves the collector but the owner's fields). Names the cgroup does not
carry come from the runtime's metadata on the host when it is readable: the kubelet's log directories
(``/var/log/pods/<namespace>_<pod>_<uid>``, ``/var/log/containers/<pod>_<namespace>_<container>-<id>.log``),
Docker's ``config.v2.json`` and Podman's ``containers.json``.

The most specific owner wins: Slurm step > pod > container > service unit > user. A login's
``session-N.scope`` (and the user manager ``user@N.service``) is not an owner: such a process is its user's,
and so is one in a transient scope or desktop app unit under the user manager (``tmux-spawn-….scope``,
``vte-spawn-….scope``, ``app-gnome-….scope``, ``app-…@autostart.service``): tmux, a terminal or a launcher
made it for a process the user started by hand. Nested containers (Docker in Docker, a kind node's pods)
are the innermost one's. Runtimes write a container's cgroup in several ways, each recognised: the systemd
``<runtime>-<id>.scope``, the cgroupfs ``…/<id>`` or ``…/crio-<id>``, containerd's
``kubepods-…-pod<uid>.slice:cri-containerd:<id>`` (the ``parent:prefix:name`` form it hands runc), a bare
64-hex top-level group on v1-only hosts; pods by their UID, dashed or (static pods) 32 hex digits.

Stdlib only, Python 3.8. Every path is under a root that tests may plant (``proc_root``, ``host_root``); a
planted file (symlink, FIFO, huge) is not followed, not blocked on, and read no further than a cap.
"""

from __future__ import annotations

import json
import os
import re
import time

from gputui.agent.proc.procfs import CGROUP_MAX_BYTES, ParsedBy, ProcTexts, read_capped
from gputui.agent.wire import wire_text

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Callable

OWNER_SLURM = "slurm"
OWNER_POD = "pod"
OWNER_CONTAINER = "container"
OWNER_UNIT = "unit"
OWNER_USER = "user"
OWNER_KINDS = (OWNER_SLURM, OWNER_POD, OWNER_CONTAINER, OWNER_UNIT, OWNER_USER)
"""Owner kinds, most specific first: the first one a process has is its owner."""

OWNER_ENV_NAMES = (
    "POD_NAME",
    "POD_NAMESPACE",
    "HOSTNAME",
    "SLURM_JOB_ID",
    "SLURM_JOBID",
    "SLURM_STEP_ID",
    "SLURM_STEPID",
    "SLURM_JOB_NAME",
)
"""The only environment variables read; a pod's HOSTNAME is its name unless the pod sets another."""

ENVIRON_MAX_BYTES = 256 * 1024
"""/proc/<pid>/environ is read no further than this (a pod's service variables run to tens of KiB)."""
OWNER_TEXT_MAX_CHARS = 253
"""Every owner field is cut here (the longest DNS name, which pod and namespace names are)."""
METADATA_MAX_BYTES = 1024 * 1024
"""A runtime metadata file (config.v2.json, containers.json) is read no further than this."""
LISTING_MAX_ENTRIES = 20000
"""At most this many names of a runtime's log directory are looked at."""
METADATA_CACHE_S = 30.0
"""Runtime names are looked up again after this long."""
CGROUP_CACHE_S = 10.0
"""A process's cgroup is read again after this long (a process can be moved to another)."""

# Patterns as text: ``re`` compiles (and keeps) each one the first time it is used, and most hosts' cgroups
# meet only a few of them, so importing this module compiles none.
_HEX_ID = r"^[0-9a-f]{12,64}$"
_BARE_ID = r"^[0-9a-f]{64}$"
_SCOPE = r"^(docker|cri-containerd|crio|libpod|nerdctl)-([0-9a-f]{12,64})(\.scope)?$"
_RUNTIME_OF_PREFIX = {
    "docker": "docker",
    "cri-containerd": "containerd",
    "nerdctl": "containerd",
    "crio": "cri-o",
    "libpod": "podman",
}
# A pod's UID: a UUID (dashes, or underscores in a systemd slice name), or a static pod's 32-hex hash.
_POD_UID = (
    r"pod([0-9a-f]{8}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{12}|[0-9a-f]{32})(?:\.slice)?$"
)
_SLURM_JOB = r"^job_([0-9]{1,20})$"
_SLURM_STEP = r"^step_([A-Za-z0-9_]{1,32})$"
_STEP_ID = r"^([0-9]{1,20}|batch|extern|interactive)$"
_JOB_ID = r"^[0-9]{1,20}$"
_NOT_OWNER_UNITS = r"^(session-.*\.scope|user@[0-9]+\.service|init\.scope|.*slurmstepd\.scope)$"
_USER_MANAGER = r"^user@[0-9]+\.service$"
_POD_LOG_DIR = r"^([a-z0-9][-a-z0-9.]*)_([a-z0-9][-a-z0-9.]*)_([0-9a-f-]{36}|[0-9a-f]{32})$"
_CONTAINER_LOG = r"^([a-z0-9][-a-z0-9.]*)_([a-z0-9][-a-z0-9.]*)_(.+)-([0-9a-f]{64})\.log$"


def _field(value: Any) -> str | None:
    """An owner field as it goes on the wire: cut to ``OWNER_TEXT_MAX_CHARS`` (the client makes it safe)."""
    if value is None:
        return None
    return wire_text(str(value), OWNER_TEXT_MAX_CHARS)


def parse_environ(data: bytes) -> dict[str, str]:
    """The ``OWNER_ENV_NAMES`` of an environ block (NUL-separated); every other variable is dropped."""
    found: dict[str, str] = {}
    wanted = {name.encode(): name for name in OWNER_ENV_NAMES}
    for entry in data.split(b"\0"):
        name, sep, value = entry.partition(b"=")
        if sep and name in wanted and wanted[name] not in found:
            text = _field(value.decode("utf-8", "backslashreplace"))
            if text:
                found[wanted[name]] = text
    return found


def cgroup_paths(text: str) -> list[str]:
    """Every hierarchy's path of a /proc/<pid>/cgroup text, the unified (v2) one and systemd's first."""
    first: list[str] = []
    rest: list[str] = []
    for line in text.splitlines():
        parts = line.split(":", 2)
        if len(parts) != 3 or not parts[2].startswith("/"):
            continue
        controllers = parts[1].split(",")
        if (parts[0] == "0" and parts[1] == "") or "name=systemd" in controllers:
            first.append(parts[2])
        else:
            rest.append(parts[2])
    return list(dict.fromkeys(first + rest))


def _path_parts(path: str) -> list[str]:
    """The names of a cgroup path; containerd's ``<slice>:<prefix>:<id>`` (the cgroupsPath it hands runc
    under the systemd driver) becomes the slice and the ``<prefix>-<id>.scope`` systemd makes of it."""
    parts: list[str] = []
    for part in path.split("/"):
        if not part:
            continue
        pieces = part.split(":")
        if len(pieces) == 3 and pieces[1] in _RUNTIME_OF_PREFIX:
            parts += [pieces[0], f"{pieces[1]}-{pieces[2]}.scope"]
        else:
            parts.append(part)
    return parts


def _container_of(parts: list[str]) -> tuple[str, str | None] | None:
    """(container id, runtime or None) of the innermost container a cgroup path names, or None."""
    kube = any(part.startswith("kubepods") for part in parts)
    found: tuple[str, str | None] | None = None
    for at, part in enumerate(parts):
        scope = re.match(_SCOPE, part)
        if scope:
            found = scope.group(2), _RUNTIME_OF_PREFIX[scope.group(1)]
        elif at > 0 and re.match(_HEX_ID, part):
            parent = parts[at - 1]
            if parent == "docker":
                found = part, "docker"
            elif parent.startswith("libpod"):
                found = part, "podman"
            elif kube and re.search(_POD_UID, parent):
                found = part, None
        elif part.startswith("libpod-") and re.match(_HEX_ID, part[7:]):
            found = part[7:], "podman"
        elif at == 0 and re.match(_BARE_ID, part):
            # v1-only hosts: a runtime given "/" as its cgroup parent puts each container at the top.
            found = part, None
    return found


def _unit_of(parts: list[str]) -> str | None:
    """The service unit a cgroup path is in, or None (a login session, the user manager, a container's
    scope, or a scope the user manager made for a process started by hand: tmux, a terminal, a launcher)."""
    for at, part in enumerate(reversed(parts)):
        if not part.endswith((".service", ".scope")) or re.match(_NOT_OWNER_UNITS, part):
            continue
        if re.match(_SCOPE, part) or "-conmon-" in part:
            return None
        above = parts[: len(parts) - 1 - at]
        if any(re.match(_USER_MANAGER, name) for name in above):
            if part.endswith(".scope") or part.startswith("app-"):
                return None
        return part
    return None


def cgroup_facts(text: str) -> dict[str, str]:
    """What a /proc/<pid>/cgroup text says of the owner: ``container`` and ``runtime``, ``pod_uid``,
    ``slurm_job`` and ``slurm_step``, ``unit`` (each only where found). Pure; for recorded texts.

    Each hierarchy's path is read (the unified or systemd one first); within a path the innermost container
    and pod count (a container nested in another, a kind node's pods in its container).
    """
    facts: dict[str, str] = {}
    for path in cgroup_paths(text):
        parts = _path_parts(path)
        kube = any(part.startswith("kubepods") for part in parts)
        container = _container_of(parts)
        if container is not None and "container" not in facts:
            facts["container"] = container[0]
            if container[1] is not None:
                facts["runtime"] = container[1]
        pods = [found.group(1) for found in (re.search(_POD_UID, part) for part in parts) if found]
        if kube and pods and "pod_uid" not in facts:
            facts["pod_uid"] = pods[-1].replace("_", "-")
        for at, part in enumerate(parts):
            job = re.match(_SLURM_JOB, part)
            if job and "slurm_job" not in facts and any("slurm" in p for p in parts[:at]):
                facts["slurm_job"] = job.group(1)
                step = re.match(_SLURM_STEP, parts[at + 1]) if at + 1 < len(parts) else None
                if step:
                    facts["slurm_step"] = step.group(1)
        if "unit" not in facts:
            unit = _unit_of(parts)
            if unit is not None:
                facts["unit"] = unit
    return facts


def owner_of(
    facts: dict[str, str],
    env: dict[str, str],
    user: str | None,
    uid: int | None,
    names: Callable[[str, str | None], dict[str, str]] | None = None,
) -> dict[str, Any]:
    """The owner dict of a process: ``{"kind", "id", "name", ...}``, the most specific kind that applies.

    Args:
        facts: ``cgroup_facts`` of its cgroup.
        env: ``parse_environ`` of its environment ({} where it cannot be read).
        user: Its user's name; uid: its real uid.
        names: (kind, id) -> what the runtime says of a pod or container (``name``, ``namespace``,
            ``container_name``); None: nothing.
    """
    lookup = names or (lambda _kind, _id: {})
    job = facts.get("slurm_job")
    step = facts.get("slurm_step")
    source = "cgroup"
    if job is None:
        env_job = env.get("SLURM_JOB_ID") or env.get("SLURM_JOBID")
        if env_job and re.match(_JOB_ID, env_job):
            job, source = env_job, "environment"
            env_step = env.get("SLURM_STEP_ID") or env.get("SLURM_STEPID")
            step = env_step if env_step and re.match(_STEP_ID, env_step) else None
    if job is not None:
        return {
            "kind": OWNER_SLURM,
            "id": job if step is None else f"{job}.{step}",
            "name": env.get("SLURM_JOB_NAME"),
            "job": job,
            "step": step,
            "source": source,
        }
    container = facts.get("container")
    pod_uid = facts.get("pod_uid")
    if pod_uid is not None:
        known = lookup(OWNER_POD, pod_uid)
        if container is not None:
            known = dict(lookup(OWNER_CONTAINER, container), **known)
        return {
            "kind": OWNER_POD,
            "id": pod_uid,
            "name": env.get("POD_NAME") or known.get("name") or env.get("HOSTNAME"),
            "namespace": env.get("POD_NAMESPACE") or known.get("namespace"),
            "container": container,
            "container_name": known.get("container_name"),
        }
    if container is not None:
        known = lookup(OWNER_CONTAINER, container)
        return {
            "kind": OWNER_CONTAINER,
            "id": container,
            "name": known.get("name"),
            "runtime": facts.get("runtime"),
        }
    unit = facts.get("unit")
    if unit is not None:
        return {"kind": OWNER_UNIT, "id": _field(unit), "name": _field(unit)}
    return {
        "kind": OWNER_USER,
        "id": user if user is not None else (None if uid is None else str(uid)),
        "name": user,
        "uid": uid,
    }


def same_owner(a: dict[str, Any] | None, b: dict[str, Any] | None) -> bool:
    """Whether two owners are one for a kill: a tree never reaches from one into another.

    Two user owners count as one (a child that changed its user is still the job's; the kernel decides
    whether it may be signalled); an owner that could not be told (None) decides nothing.
    """
    if a is None or b is None:
        return True
    if a.get("kind") == OWNER_USER and b.get("kind") == OWNER_USER:
        return True
    return (a.get("kind"), a.get("id")) == (b.get("kind"), b.get("id"))


class RuntimeNames:
    """Names of pods and containers from the runtimes' metadata on the host, where it is readable.

    Args:
        host_root: The root the metadata paths are under ("/" on a host; a temp dir in tests).
        clock: A monotonic clock (tests).
    """

    def __init__(self, host_root: str = "/", clock: Callable[[], float] = time.monotonic) -> None:
        self.host_root = host_root
        self.clock = clock
        self._pods: dict[str, dict[str, str]] = {}
        self._containers: dict[str, dict[str, str]] = {}
        self._read_at = -1e18
        self._docker: dict[str, tuple[float, str | None]] = {}

    def _path(self, *parts: str) -> str:
        return os.path.join(self.host_root, *parts)

    def _listing(self, folder: str) -> list[str]:
        try:
            with os.scandir(self._path(folder)) as entries:
                names: list[str] = []
                for entry in entries:
                    names.append(entry.name)
                    if len(names) >= LISTING_MAX_ENTRIES:
                        break
                return names
        except OSError:
            return []

    def _refresh(self) -> None:
        now = self.clock()
        if now - self._read_at < METADATA_CACHE_S:
            return
        self._read_at = now
        pods: dict[str, dict[str, str]] = {}
        for name in self._listing("var/log/pods"):
            found = re.match(_POD_LOG_DIR, name)
            if found:
                pods[found.group(3)] = {"namespace": found.group(1), "name": found.group(2)}
        containers: dict[str, dict[str, str]] = {}
        for name in self._listing("var/log/containers"):
            found = re.match(_CONTAINER_LOG, name)
            if found:
                containers[found.group(4)] = {
                    "name": found.group(1),
                    "namespace": found.group(2),
                    "container_name": found.group(3),
                }
        for entry in self._podman_entries():
            names = entry.get("names")
            if isinstance(entry.get("id"), str) and isinstance(names, list) and names:
                containers.setdefault(entry["id"], {"name": str(names[0])})
        self._pods = pods
        self._containers = containers

    def _podman_entries(self) -> list[dict[str, Any]]:
        data = read_capped(
            self._path("var/lib/containers/storage/overlay-containers/containers.json"), METADATA_MAX_BYTES
        )
        try:
            entries = json.loads(data) if data else []
        except (ValueError, RecursionError):  # a planted file nested deeper than the parser goes
            return []
        return [entry for entry in entries if isinstance(entry, dict)] if isinstance(entries, list) else []

    def _docker_name(self, container: str) -> str | None:
        now = self.clock()
        cached = self._docker.get(container)
        if cached is not None and now - cached[0] < METADATA_CACHE_S:
            return cached[1]
        name: str | None = None
        if re.match(_HEX_ID, container):
            data = read_capped(
                self._path("var/lib/docker/containers", container, "config.v2.json"), METADATA_MAX_BYTES
            )
            try:
                config = json.loads(data) if data else None
            except (ValueError, RecursionError):
                config = None
            found = config.get("Name") if isinstance(config, dict) else None
            name = found.lstrip("/") if isinstance(found, str) and found.strip("/") else None
        if len(self._docker) > 4096:
            self._docker.clear()
        self._docker[container] = (now, name)
        return name

    def __call__(self, kind: str, ident: str | None) -> dict[str, str]:
        """What the runtimes say of pod ``ident`` or container ``ident``: name, namespace, container_name."""
        if not ident:
            return {}
        self._refresh()
        if kind == OWNER_POD:
            known = dict(self._pods.get(ident, {}))
        else:
            known = dict(self._containers.get(ident, {}))
            if kind == OWNER_CONTAINER and "name" not in known:
                docker = self._docker_name(ident)
                if docker is not None:
                    known["name"] = docker
        return {key: text for key, text in ((k, _field(v)) for k, v in known.items()) if text}


class OwnerReader:
    """Owners of live processes, kept per process (pid + start ticks).

    The environment's named variables are read once per process (what a process was started with does not
    change); its cgroup is read again after ``CGROUP_CACHE_S``.

    Args:
        proc_root: Where /proc is (tests plant one).
        host_root: Where the runtimes' metadata is looked for (``RuntimeNames``).
        clock: A monotonic clock (tests).
    """

    def __init__(
        self, proc_root: str = "/proc", host_root: str = "/", clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.proc_root = proc_root
        self.texts = ProcTexts(proc_root)
        """Its processes' cgroup and environment files, shared with the other readers of one sample."""
        self.clock = clock
        self.names = RuntimeNames(host_root, clock)
        self._env: dict[tuple[int, int], dict[str, str]] = {}
        self._facts: dict[tuple[int, int], tuple[float, dict[str, str]]] = {}
        self._facts_of_text = ParsedBy(lambda data: cgroup_facts(data.decode("utf-8", "backslashreplace")))
        self._environ_of_text = ParsedBy(parse_environ)

    def facts(self, pid: int, start_ticks: int) -> dict[str, str]:
        """``cgroup_facts`` of a live process ({} when its cgroup cannot be read)."""
        key = (pid, start_ticks)
        now = self.clock()
        cached = self._facts.get(key)
        if cached is not None and now - cached[0] < CGROUP_CACHE_S:
            return cached[1]
        data = self.texts.read(pid, start_ticks, "cgroup", CGROUP_MAX_BYTES)
        facts = self._facts_of_text(data) if data else {}
        self._facts[key] = (now, facts)
        return facts

    def environment(self, pid: int, start_ticks: int) -> dict[str, str]:
        """The named variables of a live process's environment ({} where it cannot be read)."""
        key = (pid, start_ticks)
        if key not in self._env:
            data = self.texts.read(pid, start_ticks, "environ", ENVIRON_MAX_BYTES)
            self._env[key] = self._environ_of_text(data) if data else {}
        return self._env[key]

    def owner(self, pid: int, start_ticks: int, user: str | None, uid: int | None) -> dict[str, Any]:
        """The owner dict of a live process (``owner_of``)."""
        return owner_of(
            self.facts(pid, start_ticks), self.environment(pid, start_ticks), user, uid, self.names
        )

    def forget_except(self, live: set[tuple[int, int]]) -> None:
        for cache in (self._env, self._facts):
            for key in [k for k in cache if k not in live]:
                del cache[key]
