"""The class report's HTML page for one notebook: one file, offline (the chart is an embedded
PNG), for the instructor's eyes. It never shows an answer from solutions/: the hint says which
idea a blank asks."""

from __future__ import annotations

import base64
import html
import io

from autograder.report.tally import CHANGED, FAILED_FILLED, BlankTally, Flag

STYLE = """body{font-family:system-ui,sans-serif;max-width:70em;margin:2em auto;padding:0 1em}
table{border-collapse:collapse;margin:1em 0}td,th{border:1px solid #ccc;padding:.3em .6em;
text-align:left;vertical-align:top;overflow-wrap:anywhere}th{background:#f3f3f3}td.n{text-align:right}
code{background:#f6f6f6;padding:0 .2em}.bar{background:#d9534f;height:.8em;display:inline-block}
"""


def percent(share: float) -> str:
    return f"{100 * share:.0f}%"


def chart(tallies: list[BlankTally]) -> str:
    """A horizontal bar chart of each blank's share lost (unfilled and wrong apart), as a
    PNG data URL."""
    import matplotlib

    matplotlib.use("Agg")  # a file, never a window
    from matplotlib.figure import Figure

    shown = list(reversed(tallies))  # the worst at the top
    figure = Figure(figsize=(8, 0.8 + 0.28 * len(shown)))
    axes = figure.subplots()
    labels = [t.label for t in shown]
    left = [0.0] * len(shown)
    for part, color, name in ((lambda t: sum(t.wrong.values()), "#d9534f", "wrong"),
                              (lambda t: t.with_function, "#f0ad4e", "lost with its function"),
                              (lambda t: t.unfilled, "#bbbbbb", "not filled")):
        widths = [part(t) / t.graded for t in shown]
        axes.barh(labels, widths, left=left, color=color, label=name)
        left = [a + b for a, b in zip(left, widths, strict=True)]
    axes.set_xlim(0, 1)
    axes.set_xlabel("share of students who lost the blank")
    axes.legend(loc="lower right")
    axes.tick_params(axis="y", labelsize=8)
    figure.tight_layout()
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=90)
    return "data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode()


def flag_tables(flags: list[Flag]) -> list[str]:
    """Code changed outside the blanks, one row each; then per function the students whose
    filled blanks still failed, folded (a class of hundreds has many), with the complaint."""
    e = html.escape
    changed = [f for f in flags if f.kind == CHANGED]
    failed: dict[str, list[Flag]] = {}
    for f in flags:
        if f.kind == FAILED_FILLED:
            failed.setdefault(f.function, []).append(f)
    out = [f"<h3 id='changed'>Changed outside the blanks ({len(changed)})</h3>",
           "<p>Graded as released, with the student's fills: the change earned nothing.</p>"]
    if changed:
        out.append("<table><tr><th>student</th><th>function</th><th>line</th></tr>")
        out += [f"<tr><td>{e(f.student)}</td><td><code>{e(f.function)}</code></td>"
                f"<td><code>{e(f.detail)}</code></td></tr>" for f in changed]
        out.append("</table>")
    out += [f"<h3 id='failed'>Every blank filled, still failed "
            f"({sum(map(len, failed.values()))})</h3>",
            "<p>The hidden test's complaint names the idea missed; a shortcut past the idea "
            "shows here.</p><table><tr><th>function</th><th>students</th></tr>"]
    for function, rows in sorted(failed.items(), key=lambda item: -len(item[1])):
        listed = "".join(f"<li>{e(f.student)}: {e(f.detail)}</li>" for f in rows)
        out.append(f"<tr><td><code>{e(function)}</code></td><td><details><summary>{len(rows)}"
                   f"</summary><ul>{listed}</ul></details></td></tr>")
    out.append("</table>")
    return out


def render(assignment: str, graded: int, not_graded: int, tallies: list[BlankTally],
           full: dict[str, tuple[int, int]], flags: list[Flag], worst: int = 5,
           answers: int = 5) -> str:
    """The page: blanks by share lost, the worst blanks' commonest wrong answers, full marks per
    exercise, the chart, and the flagged students."""
    e = html.escape
    out = [f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>{e(assignment)}: class "
           f"report</title><style>{STYLE}</style></head><body>",
           f"<h1>{e(assignment)}: what the class missed</h1>",
           f"<p>{graded} graded submission(s)"
           + (f"; {not_graded} could not be graded (see grading/grades/{e(assignment)}.csv)"
              if not_graded else "") + ".</p>"]
    if tallies:
        out.append(f"<img alt='share of students who lost each blank' src='{chart(tallies)}'>")
    out += ["<h2 id='blanks'>Blanks, by share of students who lost them</h2>",
            "<table><tr><th>blank</th><th>the idea it asks (its hint)</th><th>lost</th>"
            "<th>wrong</th><th>not filled</th><th>lost with its function</th></tr>"]
    for t in tallies:
        out.append(f"<tr><td><code>{e(t.label)}</code></td><td>{e(t.blank.hint) or '—'}</td>"
                   f"<td class='n'>{percent(t.share)} ({t.lost}/{t.graded}) "
                   f"<span class='bar' style='width:{3 * t.share:.2f}em'></span></td>"
                   f"<td class='n'>{sum(t.wrong.values())}</td><td class='n'>{t.unfilled}</td>"
                   f"<td class='n'>{t.with_function}</td></tr>")
    out.append("</table><p>A blank is lost with its function when the hidden test failed in a "
               "way no one blank explains, or its blanks could not be read back.</p>")
    out.append("<h2 id='answers'>What the class wrote in the worst blanks</h2>")
    shown = [t for t in tallies if t.wrong][:worst]
    if not shown:
        out.append("<p>No wrong answers.</p>")
    for t in shown:
        out.append(f"<h3><code>{e(t.label)}</code> {e(t.blank.hint)}</h3><table>"
                   "<tr><th>written (as <code>ast.unparse</code> writes it)</th>"
                   "<th>students</th></tr>")
        out += [f"<tr><td><code>{e(text)}</code></td><td class='n'>{count}</td></tr>"
                for text, count in t.wrong.most_common(answers)]
        if len(t.wrong) > answers:
            rest = sum(t.wrong.values()) - sum(c for _, c in t.wrong.most_common(answers))
            out.append(f"<tr><td>{len(t.wrong) - answers} other answer(s)</td>"
                       f"<td class='n'>{rest}</td></tr>")
        out.append("</table>")
    out += ["<h2 id='exercises'>Exercises: share of full marks</h2>",
            "<table><tr><th>graded cell</th><th>full marks</th></tr>"]
    out += [f"<tr><td><code>{e(cell)}</code></td><td class='n'>{percent(n / total)} "
            f"({n}/{total})</td></tr>" for cell, (n, total) in full.items()]
    out += ["</table>", "<h2 id='flags'>Students to look at</h2>", *flag_tables(flags)]
    out.append("</body></html>\n")
    return "\n".join(out)
