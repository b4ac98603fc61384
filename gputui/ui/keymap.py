"""Every key gputui answers to, in one table: the bindings, the help screen, the command palette and the
README's key tables are all made from it.

A ``Key`` row says where the key works (``scope``: the monitor screen, a widget of it, the GPU view, the
fleet view, a dialog, or everywhere), what it does (the action, a footer label, a help line), and when it is
off (``destructive``: absent in read-only mode; ``several_hosts``: only with two hosts or more; ``fleet``:
only when the fleet view is there to go back to). Rows with ``builtin`` document a key a Textual widget
already binds (the arrows of a table): they make no binding of their own.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from textual.binding import Binding, BindingType

from gputui.core.fleet import SORT_MODES as FLEET_SORT_MODES
from gputui.transports.replay import REPLAY_REFUSAL

APP = "app"
MONITOR = "monitor"
PROCESSES = "processes"
GPUS = "gpus"
FINDINGS = "findings"
GPU_VIEW = "gpu view"
FILTER = "filter"
CONFIRM = "confirmation"
OWNER_CHOICE = "owner choice"
HOST_KEY = "host key"
HELP = "help"
FLEET = "fleet"
RECORDING = "recording"
REPLAY = "replay"


@dataclass(frozen=True)
class Key:
    """One key.

    Attributes:
        keys: Textual key names, comma-separated ("k", "home", "escape").
        display: How a person writes it ("k", "Home", "Esc").
        action: The action it runs, in Textual's action syntax; "" for a ``builtin`` key.
        help: The help screen's and the README's line. ``{escalate_s}`` is replaced by the escalation delay.
        label: The footer's label; "" keeps it out of the footer.
        palette: The command palette's title; "" keeps it out of the palette.
        scope: Where it works: everywhere (``APP``), a screen (``MONITOR``, ``GPU_VIEW``, ``FLEET``), a part
            of the monitor (``PROCESSES``, ``FILTER``, ``GPUS``, ``FINDINGS``) or a dialog (``CONFIRM``,
            ``HOST_KEY``, ``HELP``).
        destructive: Signals processes: removed in read-only mode.
        several_hosts: Only with two hosts or more.
        fleet: Only when the fleet view is there.
        priority: Checked before the focused widget's own keys.
        builtin: A key the widget already binds; documented only.
        live: Asks the live host for something (a probe, a check, a recording): refused in a replay.
        replay: Moves a replay: only while replaying a recording.
    """

    keys: str
    display: str
    action: str
    help: str
    label: str = ""
    palette: str = ""
    scope: str = MONITOR
    destructive: bool = False
    several_hosts: bool = False
    fleet: bool = False
    priority: bool = False
    builtin: bool = False
    live: bool = False
    replay: bool = False

    def help_text(self, escalate_s: float) -> str:
        return self.help.format(escalate_s=f"{escalate_s:g}")


KEYS: tuple[Key, ...] = (
    # The footer shows its keys in this order and cuts what does not fit: help comes first.
    Key("question_mark", "?", "help", "this help", "Help", "Help"),
    Key("up,down", "↑/↓", "", "select a process (PgUp/PgDn: a page)", scope=PROCESSES, builtin=True),
    Key("home", "Home", "scroll_top", "select the first process", scope=PROCESSES),
    Key("end", "End", "scroll_bottom", "select the last process", scope=PROCESSES),
    Key("left,right", "←/→", "", "scroll a long command line sideways", scope=PROCESSES, builtin=True),
    Key(
        "e",
        "e",
        "toggle_fold",
        "expand / collapse a row of alike idle processes (⋯ N ×) to pick one of them",
        scope=PROCESSES,
    ),
    Key(
        "space",
        "Space",
        "tag",
        "tag / untag the selected process (on a ⋯ row: every process in it)",
        "Tag",
        "Tag / untag process",
    ),
    Key(
        "k",
        "k",
        "kill('TERM')",
        "SIGTERM the tagged (or selected) processes; after {escalate_s} s, say whether they are gone",
        "TERM",
        "Kill: SIGTERM selected",
        destructive=True,
    ),
    Key(
        "K",
        "K",
        "kill('KILL')",
        "SIGKILL the tagged (or selected) processes",
        "KILL",
        "Kill: SIGKILL selected",
        destructive=True,
    ),
    Key(
        "T",
        "T",
        "kill_tree",
        "kill the selected tree: TERM, then KILL after {escalate_s} s",
        "Tree",
        "Kill: tree",
        destructive=True,
    ),
    Key(
        "X",
        "X",
        "kill_all",
        "kill every GPU job on this host (not the display stack; jobs of several owners: asks whose), then "
        "check for the clean slate",
        "Kill all",
        "Kill: every GPU process tree",
        destructive=True,
    ),
    Key(
        "c",
        "c",
        "check",
        "clean-slate check: sample fast until every GPU is at its baseline, then a receipt",
        "Clean?",
        "Clean-slate check",
        live=True,
    ),
    Key(
        "P",
        "P",
        "probe",
        "probe: prove each GPU takes work (a CUDA context, 64 MiB written and read back; up to 20 s); GPUs"
        " that list a process are left out",
        "",
        "Probe the GPUs",
        live=True,
    ),
    Key(
        "slash",
        "/",
        "filter",
        "filter the processes by pid, user or command, or by owner: pod:NAME, slurm:JOB, container:ID, "
        "unit:NAME, user:NAME",
        "Filter",
        "Filter processes",
    ),
    Key("escape", "Esc", "clear_filter", "clear the filter and go back to the list", scope=FILTER),
    Key("s", "s", "sort", "sort the processes: tree, gpu (memory), pid", "Sort", "Sort processes"),
    Key("t", "t", "tree", "tree view on / off (as in nvitop and htop)", "", "Tree view on / off"),
    Key("g", "g", "focus_gpus", "go to the GPUs", "GPUs", "Go to the GPUs"),
    Key("up", "↑/↓", "cursor_up", "choose a GPU", scope=GPUS),
    Key("down", "", "cursor_down", "", scope=GPUS),
    Key(
        "enter",
        "Enter",
        "open",
        "the GPU's last 10 minutes and the processes holding it",
        "History",
        scope=GPUS,
    ),
    Key("escape", "Esc", "leave", "back to the process list", scope=GPUS),
    Key(
        "R",
        "R",
        "reset_gpu",
        "reset the GPU under the GPU list's cursor: what blocks nvidia-smi -r, the steps; run once confirmed",
        "",
        "Reset the selected GPU",
        destructive=True,
    ),
    Key("f", "f", "focus_findings", "go to the findings", "", "Go to the findings"),
    Key("enter", "Enter", "", "jump to the process the finding names", scope=FINDINGS, builtin=True),
    Key("escape", "Esc", "leave", "back to the process list", scope=FINDINGS),
    Key("r", "r", "refresh", "refresh now (a host that stopped retrying: connect again)", "", "Refresh now"),
    Key("p", "p", "pause", "pause / resume the display", "", "Pause / resume"),
    Key("tab", "Tab", "next_host", "next host", "", "Next host", several_hosts=True, priority=True),
    Key(",".join(str(n) for n in range(1, 10)), "1–9", "host", "show host 1–9", several_hosts=True),
    Key(
        "escape",
        "Esc",
        "back",
        "clear the filter, then the tags; then, from the fleet view, back to it (closing the host opened "
        "from it)",
        "Back",
    ),
    Key("escape,q", "Esc, q", "close", "back to the monitor", "Back", scope=GPU_VIEW),
    Key("enter,y", "Enter, y", "confirm", "send the signals listed", scope=CONFIRM),
    Key("escape,n", "Esc, n", "cancel", "cancel: nothing is signalled", scope=CONFIRM),
    Key(
        ",".join(str(n) for n in range(1, 10)),
        "1–9",
        "pick",
        "kill the GPU jobs of the owner with that number",
        scope=OWNER_CHOICE,
        destructive=True,
    ),
    Key("a", "a", "all", "kill every owner's GPU jobs", scope=OWNER_CHOICE, destructive=True),
    Key("escape,n", "Esc, n", "cancel", "cancel: nothing is signalled", scope=OWNER_CHOICE),
    Key("a", "a", "accept", "accept the unknown host key and remember it", scope=HOST_KEY),
    Key("escape", "Esc", "refuse", "refuse it: nothing is written, nothing connects", scope=HOST_KEY),
    Key("escape,question_mark,q", "Esc, ?, q", "close", "close the help", scope=HELP),
    Key(
        "q",
        "q",
        "quit",
        "quit (with a kill under way: once it is done; q again abandons it)",
        "Quit",
        scope=APP,
    ),
    Key("ctrl+c", "Ctrl+C", "quit", "quit, as q", scope=APP, priority=True),
    Key("ctrl+p", "Ctrl+P", "", "command palette: every action by name", scope=APP, builtin=True),
    Key(
        "up,down,pageup,pagedown",
        "↑/↓, PgUp/PgDn",
        "",
        "move between hosts; the GPUs of the host under the cursor are shown below",
        scope=FLEET,
        builtin=True,
    ),
    Key(
        "enter",
        "Enter",
        "open_host",
        "open the host over SSH in the monitor (processes, zombies, kills, the full clean slate)",
        "Open host",
        scope=FLEET,
    ),
    Key(
        "slash",
        "/",
        "filter",
        "filter by host, GPU model, server or state (stale, gone)",
        "Filter",
        scope=FLEET,
    ),
    Key("escape", "Esc", "clear_filter", "clear the filter", scope=FLEET),
    Key(
        "s",
        "s",
        "sort",
        f"sort: {', '.join(FLEET_SORT_MODES)} (age: oldest data first; dead: memory of dead processes)",
        "Sort",
        scope=FLEET,
    ),
    Key("r", "r", "refresh", "ask Prometheus now", "Refresh", scope=FLEET),
    Key("question_mark", "?", "help", "this help", "Help", scope=FLEET),
    Key(
        "w",
        "w",
        "record",
        "start / stop writing every sample, finding, verdict and kill to a file (gputui replay FILE plays"
        " it back)",
        "",
        "Record: start / stop",
        scope=RECORDING,
        live=True,
    ),
    Key(
        "p", "p", "", "pause / play the replay (the display with it)", scope=REPLAY, builtin=True, replay=True
    ),
    Key(
        "greater_than_sign",
        ">",
        "replay_step(1)",
        "pause, then step to the next sample",
        scope=REPLAY,
        replay=True,
    ),
    Key(
        "less_than_sign",
        "<",
        "replay_step(-1)",
        "pause, then step to the sample before",
        scope=REPLAY,
        replay=True,
    ),
    Key(
        "right_square_bracket",
        "]",
        "replay_moment(1)",
        "go to the next moment (a verdict, a server state, a finding, a kill)",
        scope=REPLAY,
        replay=True,
    ),
    Key(
        "left_square_bracket", "[", "replay_moment(-1)", "go to the moment before", scope=REPLAY, replay=True
    ),
    Key("plus", "+", "replay_speed(1)", "replay faster (up to 256×)", scope=REPLAY, replay=True),
    Key("minus", "-", "replay_speed(-1)", "replay slower (down to ¼×)", scope=REPLAY, replay=True),
)
"""Every key, in the order the help and the README list them."""


def keys_of(scope: str) -> tuple[Key, ...]:
    """The rows of one scope, in table order."""
    return tuple(key for key in KEYS if key.scope == scope)


def bindings(scope: str, *, read_only: bool = False) -> list[BindingType]:
    """The ``BINDINGS`` of one scope (documented-only rows make none); ``read_only``: destructive keys are
    kept out of the footer (they still answer, saying why they do nothing)."""
    made: list[BindingType] = []
    for key in keys_of(scope):
        if key.builtin:
            continue
        if key.action == "host":
            # One binding per digit, each with its host index.
            made.extend(Binding(str(n), f"host({n - 1})", f"Host {n}", show=False) for n in range(1, 10))
            continue
        if key.action == "pick":
            made.extend(Binding(str(n), f"pick({n})", f"Owner {n}", show=False) for n in range(1, 10))
            continue
        shown = bool(key.label) and not (read_only and key.destructive)
        made.append(Binding(key.keys, key.action, key.label or key.help, show=shown, priority=key.priority))
    return made


def available(key: Key, *, read_only: bool, hosts: int, fleet: bool, replay: bool = False) -> bool:
    """Whether ``key`` works now."""
    return why_off(key, read_only=read_only, hosts=hosts, fleet=fleet, replay=replay) is None


def why_off(key: Key, *, read_only: bool, hosts: int, fleet: bool, replay: bool = False) -> str | None:
    """The one line a key that does nothing now answers with (None: it works); ``replay``: the app shows a
    recording (``gputui replay``), where nothing can be signalled or asked of a host."""
    if replay and key.destructive:
        return REPLAY_REFUSAL
    if replay and key.live:
        return f"replay: {key.display} asks the live host; a recording cannot be asked"
    if key.replay and not replay:
        return f"{key.display}: only while replaying a recording (gputui replay FILE)"
    if key.destructive and read_only:
        return f"read-only: {key.display} signals nothing (gputui was started with --read-only)"
    if key.several_hosts and hosts < 2:
        return f"{key.display}: only one host is open"
    if key.fleet and not fleet:
        return f"{key.display}: there is no fleet view to go back to"
    return None


RECORDING_HELP_SCOPES = (RECORDING, REPLAY)
"""What the monitor's help lists after ``MONITOR_HELP_SCOPES`` (the keys that record and replay)."""
MONITOR_HELP_SCOPES = (
    PROCESSES,
    MONITOR,
    FILTER,
    GPUS,
    FINDINGS,
    GPU_VIEW,
    CONFIRM,
    OWNER_CHOICE,
    HOST_KEY,
    APP,
)
"""What the monitor's help lists."""
FLEET_HELP_SCOPES = (FLEET, FILTER, APP)
"""What the fleet view's help lists."""


def _in_scopes(scopes: Iterable[str]) -> list[Key]:
    """The rows of these scopes, scope by scope, each in table order."""
    return [key for scope in scopes for key in keys_of(scope)]


def _where(key: Key) -> str:
    """ "processes: " before a key that works in one part of a screen only."""
    return "" if key.scope in (MONITOR, APP, FLEET) else f"{key.scope}: "


def help_rows(
    scopes: Iterable[str],
    *,
    read_only: bool,
    hosts: int,
    fleet: bool,
    escalate_s: float,
    replay: bool = False,
) -> list[tuple[str, str]]:
    """(key, what it does) for the help screen: the keys that work now, by scope, in table order."""
    rows = []
    for key in _in_scopes(scopes):
        if available(key, read_only=read_only, hosts=hosts, fleet=fleet, replay=replay):
            if key.display:
                rows.append((key.display, _where(key) + key.help_text(escalate_s)))
    return rows


def palette_entries(
    *, read_only: bool, hosts: int, fleet: bool, escalate_s: float, replay: bool = False
) -> list[tuple[str, str, str]]:
    """(title, help, action) of the monitor's commands for the command palette, as they work now."""
    return [
        (key.palette, key.help_text(escalate_s), key.action)
        for key in keys_of(MONITOR)
        if key.palette and available(key, read_only=read_only, hosts=hosts, fleet=fleet, replay=replay)
    ]


def per_key(rows: Iterable[tuple[str, str]]) -> list[tuple[str, list[str]]]:
    """(key, what it does in each place) once per key, in the order keys first come: a row shown as
    "Esc, q" counts for Esc and for q."""
    merged: dict[str, list[str]] = {}
    for display, does in rows:
        for name in display.split(","):
            merged.setdefault(name.strip(), []).append(does)
    return list(merged.items())


def markdown_table(scopes: Iterable[str], escalate_s: float = 5.0) -> str:
    """The README's key table for these scopes: one row per key, what it does in each place after " · "."""
    lines = ["| key | does |", "| --- | --- |"]
    rows = [(k.display, _where(k) + k.help_text(escalate_s)) for k in _in_scopes(scopes) if k.display]
    for name, does in per_key(rows):
        lines.append(f"| {_markdown_key(name)} | {' · '.join(does)} |")
    return "\n".join(lines)


def _markdown_key(display: str) -> str:
    """A typed character in backticks (`k`, `/`); a named key as it is (Esc, Tab, ↑/↓)."""
    return f"`{display}`" if len(display) == 1 else display
