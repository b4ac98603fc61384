"""The process panel's ``/`` filter: plain words match pid, user or command; ``KIND:TEXT`` words an owner.

``pod:web-0``, ``slurm:4242`` (every step of job 4242; ``slurm:4242.0`` one step), ``container:trainer``,
``unit:cron`` and ``user:alice`` each keep the processes of that owner
(``gputui.core.model.owner.owner_matches``); several owner words keep what matches any of them, and the plain
words must also appear, as one piece of text, in the process's pid, user, name or command. Case does not
matter.
"""

from __future__ import annotations

from gputui.core.model.owner import owner_matches, split_owner_word
from gputui.core.model.record import Record
from gputui.core.model.snapshot import Proc


class ProcFilter(Record):
    """A parsed filter text.

    Attributes:
        owners: (kind, text) of each owner word.
        text: The rest, lower case, words joined by one space; "" matches every process.
    """

    owners: tuple[tuple[str, str], ...] = ()
    text: str = ""

    @classmethod
    def parse(cls, filter_text: str) -> ProcFilter:
        owners: list[tuple[str, str]] = []
        words: list[str] = []
        for word in filter_text.split():
            parsed = split_owner_word(word)
            if parsed is None:
                words.append(word.lower())
            else:
                owners.append(parsed)
        return cls(tuple(owners), " ".join(words))

    @property
    def empty(self) -> bool:
        return not self.owners and not self.text

    def matches(self, proc: Proc, haystack: str) -> bool:
        """Whether ``proc`` passes; ``haystack`` is the lower-case text its plain words are looked for in."""
        if self.owners and not any(owner_matches(proc.owner, kind, text) for kind, text in self.owners):
            return False
        return not self.text or self.text in haystack
