"""The width classes every screen lays itself out for: a tmux side pane (60 columns and less), a stacked
middle (61–99) and side by side (100 and more)."""

from __future__ import annotations

NARROW_MAX_CELLS = 60
"""At or below this width (a tmux side pane) the panels show their compact lines and charts are stacked."""
STACKED_BELOW_CELLS = 100
"""Narrower than this, the panels are stacked instead of side by side."""
