"""What the fleet view knows about the host under the cursor beyond its GPU lines: the exporter and the age
of its data, MIG instances, inference servers, XID errors, the host's error, and where Enter goes."""

from __future__ import annotations

from rich.text import Text

from gputui.core.fleet import FleetHost, FleetRow, state_text
from gputui.core.text import age_since, size_text
from gputui.core.verdict import headline
from gputui.ui.widgets.fmt import DASH, safe_text
from gputui.ui.widgets.text_view import TextView


def notes_text(host: FleetHost, row: FleetRow, ssh_target: str | None) -> Text:
    """The lines for one host (each cut to the widget's width, never wrapped)."""
    lines: list[Text] = []
    head = Text()
    head.append_text(safe_text(host.name, 40, style="bold"))
    exporter = ", ".join(host.instances) or DASH
    up = {True: "up", False: "DOWN", None: "up unknown"}[host.exporter_up]
    head.append(" · exporter ")
    head.append_text(safe_text(exporter, 60))
    head.append(f" ({up})", style="red" if host.exporter_up is False else "dim")
    head.append(f" · data {state_text(row)}", style="yellow" if row.state != "live" else "dim")
    head.append(" · Enter: ssh ", style="dim")
    head.append_text(safe_text(ssh_target, 60) if ssh_target else Text("not possible", style="red"))
    lines.append(head)
    if row.error:
        lines.append(Text("! ", style="bold red").append_text(safe_text(row.error, 200, style="red")))
    for index, code in sorted(host.xid.items()):
        lines.append(Text(f"XID {code} on GPU{index}: see the host's kernel log (dmesg)", style="bold red"))
    verdict = host.snapshot.verdict
    if not row.memory_only and verdict is not None:
        line = Text("gputui exporter: ", style="green" if verdict.clean else "bold red")
        line.append_text(safe_text(headline(verdict), 200, style="green" if verdict.clean else "bold red"))
        cannot = host.exported.cannot_check if host.exported is not None else ()
        if cannot:
            line.append(f" · cannot check: {', '.join(cannot)}", style="dim")
        lines.append(line)
    for finding in host.snapshot.findings:
        if finding.kind == "xid":
            continue  # said above
        line = Text("! ", style="bold red")
        line.append_text(safe_text(finding.kind, 20, style="bold"))
        line.append(": ")
        line.append_text(safe_text(finding.detail, 200))
        age = "" if host.snapshot.time is None else age_since(finding.since, host.snapshot.time)
        if age:
            line.append(f" · {age}", style="dim")
        lines.append(line)
    for index, instances in sorted(host.mig.items()):
        line = Text(f"GPU{index} MIG:", style="cyan")
        for instance in instances:
            line.append(" ")
            line.append_text(safe_text(instance.instance_id, 8))
            line.append(" (")
            line.append_text(safe_text(instance.profile or "?", 16))
            line.append(f") {size_text(instance.memory_used_mib)}/{size_text(instance.memory_total_mib)}")
        lines.append(line)
    for server in host.snapshot.endpoints:
        line = Text("server ")
        line.append_text(safe_text(server.url, 60))
        state = server.state or "state unknown"
        line.append(f" {state}", style="green" if state == "UP" else "bold red" if state == "DOWN" else "dim")
        if server.detail:
            line.append(" · ")
            line.append_text(safe_text(server.detail, 80))
        lines.append(line)
    text = Text("\n").join(lines)
    text.no_wrap = True
    text.overflow = "ellipsis"
    return text


class FleetNotes(TextView):
    """The notes of the host under the cursor (see ``notes_text``)."""
