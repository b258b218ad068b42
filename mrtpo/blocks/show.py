"""Printing preview records and lint reports: rich tables for a terminal, plain text for pipes.

Kept apart from the CLI so the two layouts can be tested as functions; neither adds or drops
content, so piping the preview loses only colour and boxes. Lone surrogates (model output may
hold one) are shown as U+FFFD: a terminal cannot encode them.
"""
from __future__ import annotations

from mrtpo.blocks.lint import LintReport
from mrtpo.blocks.rules import RULES, Finding
from mrtpo.textio import scrub_all


def _indent(text: str, prefix: str) -> str:
    return "\n".join(prefix + line for line in (text.splitlines() or [""]))


def _score(x) -> str:
    return "-" if x is None else f"{x:g}"


def _changes_plain(changes: list[dict], sign_removed: str = "-", sign_added: str = "+") -> list[str]:
    lines = []
    for ch in changes:
        for t in ch["removed"]:
            lines.append(_indent(t, f"    {sign_removed} "))
        for t in ch["added"]:
            lines.append(_indent(t, f"    {sign_added} "))
    return lines


def record_plain(rec: dict) -> str:
    """One preview record as plain text."""
    rec = scrub_all(rec)
    out = [f"== {rec['task']} | example {rec['example']}"
           + (f" ({rec['source']})" if rec.get("source") else "")
           + f" | response: {rec['response_name']} =="]
    out.append("P0")
    for m in rec["P0"]:
        head = f"  [{m.get('role')}] "
        body = _indent(str(m.get("content", "")), " " * len(head))
        out.append(head + body[len(head):])
    out.append("response")
    out.append(_indent(rec["response"], "  | ") if rec["response"] else "  (empty)")
    out.append("rewards")
    for r in rec["rewards"]:
        tags = [r["kind"] or "other", f"weight {r['weight']:g}"]
        if r["response_dependent"]:
            tags.append("response-dependent")
        out.append(f"  {r['name']}  ({', '.join(tags)})  score {_score(r['score'])}")
        fb = r["feedback"]
        out.append("    feedback: " + (fb.replace("\n", " ") if fb else "-"))
        out.append(_indent(r["block"], "    block | ") if r["block"] else "    block: (empty)")
    ctx = rec["contexts"]
    out.append(f"contexts (placement: {ctx['placement']})")
    if ctx["P_all"] is None:
        out.append("  (not built: see the findings)")
    else:
        ch = ctx["P_all"]["changes_from_P0"]
        out.append("  P_all = P0" + (" plus:" if ch else " (nothing added)"))
        out += _changes_plain(ch)
        for w in ctx["P_without"]:
            if w["changes"]:
                out.append(f"  P_without[{w['reward']}] = P_all with:")
                out += _changes_plain(w["changes"])
            else:
                out.append(f"  P_without[{w['reward']}] = P_all (empty block: nothing removed)")
    fs = rec["findings"]
    out.append("lint: " + ("clean" if not fs else f"{len(fs)} finding(s)"))
    for f in fs:
        out.append("  " + _finding_line(f))
    for f in rec.get("waived", []):
        out.append("  waived: " + _finding_line(f) + f" (reason: {f['waived']})")
    return "\n".join(out) + "\n"


def _finding_line(f: dict | Finding) -> str:
    d = f.to_dict() if isinstance(f, Finding) else f
    where = " ".join(x for x in (d["reward"] and f"[{d['reward']}]",
                                 d["response"] and f"({d['response']})") if x)
    exc = f"  -- {d['excerpt']!r}" if d.get("excerpt") else ""
    return f"{d['rule']} {d['check']} {where}: {d['message']}{exc}"


def record_rich(rec: dict, console) -> None:
    """One preview record as rich tables."""
    from rich.panel import Panel
    from rich.table import Table
    from rich.text import Text

    rec = scrub_all(rec)

    title = f"{rec['task']} | example {rec['example']}" + (
        f" ({rec['source']})" if rec.get("source") else "") + f" | response: {rec['response_name']}"
    p0 = Table("role", "content", box=None, show_header=False, expand=True)
    for m in rec["P0"]:
        p0.add_row(Text(str(m.get("role")), style="bold"), Text(str(m.get("content", ""))))
    console.print(Panel(p0, title=Text(title, style="bold cyan"), subtitle="P0", expand=True))
    console.print(Panel(Text(rec["response"] or "(empty)"), title="response", expand=True))

    rw = Table("reward", "kind", "score", "feedback", "block", expand=True, show_lines=True)
    for r in rec["rewards"]:
        kind = (r["kind"] or "other") + (" *" if r["response_dependent"] else "")
        score = _score(r["score"])
        rw.add_row(Text(r["name"], style="bold"), Text(kind),
                   Text(score, style="green" if r["score"] and r["score"] >= 1 else "red"),
                   Text(r["feedback"] or "-", style="dim" if not r["feedback"] else ""),
                   Text(r["block"] or "(empty)", style="dim" if not r["block"] else ""))
    console.print(rw)
    console.print(Text("* response-dependent block", style="dim"))

    ctx = rec["contexts"]
    ct = Table("context", "vs", "removed", "added", title=Text(f"contexts (placement: {ctx['placement']})"),
               expand=True, show_lines=True)
    if ctx["P_all"] is not None:
        ch = ctx["P_all"]["changes_from_P0"]
        ct.add_row("P_all", "P0", Text("\n".join(t for c in ch for t in c["removed"]) or "-"),
                   Text("\n".join(t for c in ch for t in c["added"]) or "-", style="green"))
        for w in ctx["P_without"]:
            ct.add_row(Text(f"P_without[{w['reward']}]"), "P_all",
                       Text("\n".join(t for c in w["changes"] for t in c["removed"]) or "- (empty block)",
                            style="red"),
                       Text("\n".join(t for c in w["changes"] for t in c["added"]) or "-"))
    else:
        ct.add_row("-", "-", "not built: see the findings", "")
    console.print(ct)
    fs = rec["findings"]
    if not fs:
        console.print(Text("lint: clean", style="green"))
    else:
        for f in fs:
            console.print(Text(_finding_line(f), style="yellow"))
    for f in rec.get("waived", []):
        console.print(Text(f"waived: {_finding_line(f)} (reason: {f['waived']})", style="dim"))
    console.print()


def _waived_lines(report: LintReport) -> list[str]:
    """One line per waived (reward, rule, check): the reason and how many examples it covered."""
    return [f"waived {f.rule} {f.check} [{f.reward}] in {n} example(s): {f.waived}"
            for f, n in report.waived_groups()]


def _locations(locs: list[str], limit: int, count: int | None = None) -> str:
    """The first `limit` locations, then how many more (`count`: all of them, when only the
    first few were kept)."""
    count = len(locs) if count is None else count
    shown = ", ".join(locs[:limit])
    return shown + (f", ... and {count - min(limit, len(locs))} more" if count > min(limit, len(locs)) else "")


def _total_line(report: LintReport) -> str:
    n = report.total
    return (("no findings" if not n else f"{n} finding(s)")
            + (f", {report.waived_total} waived" if report.waived_total else ""))


def report_plain(report: LintReport, task: str, max_per_rule: int = 10) -> str:
    """The lint summary by rule: each distinct problem once, with its example locations."""
    out = [f"blocks lint: task {task}: {report.examples} examples, {report.responses} responses, "
           f"{report.blocks} non-empty blocks"]
    for rule, problems in report.grouped().items():
        out.append(f"{rule} {RULES.get(rule, '')}: " + ("ok" if not problems else
                   f"{len(problems)} problem(s) in {report.examples_per_rule[rule]} example(s)"))
        for p in problems[:max_per_rule]:
            f = p.finding
            out.append("  " + _finding_line(Finding(f.rule, f.check, f.message, f.excerpt, "", f.reward, "")))
            out.append(f"    in {p.examples} example(s): {_locations(p.locations, 5, p.examples)}")
        if len(problems) > max_per_rule:
            out.append(f"  ... and {len(problems) - max_per_rule} more problem(s)")
    out += _waived_lines(report)
    out += [f"cut: {line}" for line in report.cut()]
    out.append(_total_line(report))
    return "\n".join(out) + "\n"


def report_rich(report: LintReport, task: str, console, max_per_rule: int = 10) -> None:
    from rich.markup import escape
    from rich.table import Table
    from rich.text import Text

    t = Table("rule", escape("check [reward]"), "what to change", "examples",
              title=Text(f"blocks lint: task {task}: {report.examples} examples, {report.responses} "
                         f"responses, {report.blocks} non-empty blocks"), show_lines=True, expand=True)
    for rule, problems in report.grouped().items():
        title = f"{rule} {RULES.get(rule, '')}"
        if not problems:
            t.add_row(Text(title), Text("ok", style="green"), "", "")
        for i, p in enumerate(problems[:max_per_rule]):
            f = p.finding
            t.add_row(Text(title if i == 0 else ""),
                      Text(f.check + (f" [{f.reward}]" if f.reward else ""), style="yellow"),
                      Text(f.message + (f"\n-- {f.excerpt!r}" if f.excerpt else "")),
                      Text(f"{p.examples}: {_locations(p.locations, 3, p.examples)}"))
        if len(problems) > max_per_rule:
            t.add_row("", "", Text(f"... and {len(problems) - max_per_rule} more problem(s)"), "")
    console.print(t)
    for line in _waived_lines(report):
        console.print(Text(line, style="dim"))
    for line in report.cut():
        console.print(Text(f"cut: {line}", style="yellow"))
    console.print(Text(_total_line(report), style="green" if not report.total else "red"))
