"""Whose jobs a fleet host's GPUs run, as DCGM's exporter says: its pod, namespace and container labels.

dcgm-exporter with its Kubernetes mapping labels a GPU's series with the pod that has the GPU (each MIG
instance's series with the pod that has the instance). Scraped without ``honor_labels`` (a ServiceMonitor's
default), Prometheus keeps them as ``exported_pod`` (and so on) beside its own target labels, which then name
the exporter's own pod: the ``exported_`` ones win. A GPU no pod has carries empty owner labels, which
Prometheus fills with the target's own: the pod of the scrape target (the ``up`` series of the same
``instance`` names it) is never a workload's owner.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from gputui.core.model import Owner, owner_matches, split_owner_word
from gputui.core.text import visible

DCGM_OWNER_LABELS = (
    "exported_pod",
    "exported_namespace",
    "exported_container",
    "pod",
    "namespace",
    "container",
)
"""The GPU series labels read for owners."""


def dcgm_owner(labels: Mapping[str, str], target: Mapping[str, str] | None = None) -> Owner | None:
    """The pod a GPU's series name, None where they name none.

    Args:
        labels: The series' labels.
        target: The labels of its scrape target (its ``up`` series): a ``pod`` equal to the target's own (in
            the same namespace) is the exporter's, not a workload's.
    """
    prefix = "exported_" if labels.get("exported_pod") else ""
    pod = labels.get(prefix + "pod")
    if not pod:
        return None
    namespace = labels.get(prefix + "namespace") or ""
    own = target or {}
    if not prefix and pod == own.get("pod") and namespace == (own.get("namespace") or ""):
        return None
    container = labels.get(prefix + "container") or ""
    details = tuple(
        (k, visible(v[:253])) for k, v in (("namespace", namespace), ("container_name", container)) if v
    )
    ident = f"{namespace}/{pod}" if namespace else pod
    return Owner("pod", visible(ident[:253]), visible(pod[:253]), details)


def owner_labels(owners: Iterable[Owner]) -> tuple[str, ...]:
    """Distinct labels (``pod:ns/name``), sorted."""
    return tuple(sorted({owner.label for owner in owners}))


def owners_match(owners: Iterable[Owner], needle: str) -> bool:
    """Whether a fleet filter text names one of ``owners``: a ``pod:NAME`` word, or text in a label."""
    listed = list(owners)
    parsed = split_owner_word(needle)
    if parsed is not None:
        return any(owner_matches(owner, *parsed) for owner in listed)
    return any(needle in owner.label.lower() for owner in listed)
