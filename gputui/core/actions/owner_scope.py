"""Owners in kill plans: a kill never crosses a container, pod or Slurm step the user did not pick.

A tree's walk stops at a member of another owner (``gputui.agent.proc.owners.same_owner``: the collector's own
rule, which its kill applies again when it signals); a kill of every GPU job takes the jobs of one owner,
or of all of them when asked in so many words (``--owner all``), and is refused on a host with several
owners when none was named (``OwnersError``, which names them).
"""

from __future__ import annotations

from collections.abc import Iterable

from gputui.agent.proc.owners import same_owner
from gputui.core.model import Owner, Proc, owner_matches
from gputui.core.text import fit

OWNER_ALL = "all"
"""``--owner all``: every owner's jobs."""
OWNERS_SHOWN = 8
"""An error line names at most this many owners."""


class OwnerScopeError(ValueError):
    """A kill-all that would cross owners nobody picked, or an ``--owner`` that names none."""

    def __init__(self, line: str, owners: tuple[Owner, ...] = ()) -> None:
        super().__init__(line)
        self.owners = owners


def owner_dict(owner: Owner | None) -> dict[str, str | None] | None:
    return None if owner is None else {"kind": owner.kind, "id": owner.id}


def crosses(root: Proc, member: Proc) -> bool:
    """Whether ``member`` of ``root``'s tree belongs to another owner (it is then left out)."""
    return not same_owner(owner_dict(root.owner), owner_dict(member.owner))


def owners_named(owners: Iterable[Owner]) -> str:
    """``slurm:4242.0, pod:default/web-0`` (terminal-safe), at most ``OWNERS_SHOWN`` and a count."""
    listed = list(owners)
    words = [fit(o.label, 80) for o in listed[:OWNERS_SHOWN]]
    more = len(listed) - OWNERS_SHOWN
    return ", ".join(words) + (f" and {more} more" if more > 0 else "")


def distinct_owners(procs: Iterable[Proc]) -> tuple[Owner, ...]:
    """The owners of ``procs``, each once, in order (processes without one left out)."""
    found: dict[tuple[str, str | None], Owner] = {}
    for proc in procs:
        if proc.owner is not None and proc.owner.key not in found:
            found[proc.owner.key] = proc.owner
    return tuple(found.values())


def choose_roots(roots: list[Proc], owner: tuple[str, str] | None) -> list[Proc]:
    """The kill-all roots of the owner the user picked.

    Args:
        roots: Every GPU job's root.
        owner: (kind, text) from ``gputui.core.model.owner.parse_owner_option``; ("all", "") for every owner;
            None: none named, which is only allowed where every job has the same owner.

    Raises:
        OwnerScopeError: No owner named on a host with several, or the one named has no GPU job.
    """
    owners = distinct_owners(roots)
    if owner is None:
        if len(owners) > 1:
            raise OwnerScopeError(
                f"GPU jobs of {len(owners)} owners ({owners_named(owners)}): name one with --owner KIND:ID, "
                "or --owner all for every one",
                owners,
            )
        return roots
    if owner[0] == OWNER_ALL:
        return roots
    chosen = [root for root in roots if owner_matches(root.owner, owner[0], owner[1])]
    if not chosen:
        named = f"{owner[0]}:{fit(owner[1], 80)}"
        have = owners_named(owners) or "none"
        raise OwnerScopeError(f"no GPU job of {named} (owners with GPU jobs: {have})", owners)
    return chosen
