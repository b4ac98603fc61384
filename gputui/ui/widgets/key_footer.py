"""Textual's Footer without the keys of its earlier compositions.

Every ``FooterKey`` the Footer composes binds ``compact`` to it (``data_bind``), which puts the key on the
Footer's watcher list. Textual drops closed keys from that list only when ``compact`` changes, so each
recompose (every change of the screen's bindings) leaves the previous keys reachable, with their styles and
rendered lines, for as long as the Footer lives. ``KeyFooter`` drops them once a recompose has removed them.
"""

from __future__ import annotations

from textual.widgets import Footer

WATCHERS = "__watchers"
"""The attribute Textual keeps a reactable's watchers under (textual/reactive.py, ``_watch``)."""


class KeyFooter(Footer):
    """``Footer`` whose watcher list holds only keys that are still mounted (see the module docstring)."""

    async def recompose(self) -> None:
        await super().recompose()
        self.drop_removed_watchers()

    def drop_removed_watchers(self) -> None:
        """Forget the watchers of keys that are no longer mounted here (they can never be called again)."""
        for watchers in getattr(self, WATCHERS, {}).values():
            watchers[:] = [(node, callback) for node, callback in watchers if node.is_attached]
