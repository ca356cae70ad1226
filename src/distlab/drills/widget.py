"""The drill in JupyterLab: `Drill()` in a notebook cell (notebooks/drills/drills.ipynb).

Pick a snippet and a number of blanks; the code appears with numbered input boxes where the
blanks are, every box as wide as the others until you type (a box's width never tells an
answer's length). Check marks each blank ✓ or ✗ (and says why); editing a box after Check
clears its mark. Reveal one / Reveal all fill in the reference of the blanks not right as they
now read (a revealed blank counts as missed, once: missed at Check and then revealed is one
miss); Refresh draws a new set and clears the message. The bars below are the mastery of every
snippet: the share of its positions whose last check was right.
"""

from __future__ import annotations

import html
import random

import ipywidgets as w

from distlab.drills import Checker, DrillError, draw, history, load, maskable
from distlab.drills.check import DIFFERS, EMPTY, INVALID, RIGHT, WRONG
from distlab.drills.positions import fitting, template

CODE = "font-family: var(--jp-code-font-family, monospace); font-size: 13px; line-height: 22px"
STYLE = f"""<style>
.drill-code .widget-html, .drill-code .widget-html-content {{ margin: 0; height: auto; }}
.drill-code pre {{ margin: 0; white-space: pre; {CODE}; }}
.drill-code .widget-hbox {{ align-items: center; gap: 0; }}
.drill-code .widget-text {{ margin: 0 2px; width: auto; }}
.drill-code .widget-text input {{ {CODE}; padding: 0 3px; height: 20px; }}
.drill-code .drill-blank input {{ field-sizing: content; min-width: 12ch; max-width: 70ch; }}
.drill-mastery td {{ padding: 0 8px 0 0; line-height: 16px; }}
.drill-number {{ font-size: 9px; color: var(--jp-ui-font-color2); vertical-align: super; }}
</style>"""
MARKS = {RIGHT: "✓", WRONG: "✗", INVALID: "✗", EMPTY: "·", DIFFERS: "?", "revealed": "↺"}


def _pre(text: str) -> w.HTML:
    return w.HTML(f"<pre>{html.escape(text)}</pre>")


class Drill(w.VBox):
    """A drill over the course's snippets; `Drill("ring_allreduce", blanks=5, seed=1)`."""

    def __init__(self, snippet: str | None = None, blanks: int = 5, seed: int | None = None):
        self.checker = Checker()
        self.snippets = {name: snippet for name, snippet in load().items()  # drillable ones
                         if maskable(snippet.source, name)}
        if not self.snippets:
            super().__init__([w.HTML("No drill snippets: drills.toml opens no notebook yet, or "
                                     "the course's solved sources are not installed here.")])
            return
        self.seed = random.randrange(1 << 30) if seed is None else seed
        self.picker = w.Dropdown(options=[(f"{n}  ({s.assignment})", n)
                                          for n, s in self.snippets.items()],
                                 value=snippet or next(iter(self.snippets)), description="snippet")
        self.count = w.BoundedIntText(value=blanks, min=1, max=1, description="blanks",
                                      layout=w.Layout(width="160px"))
        self.summary = w.HTML()
        self.code = w.VBox().add_class("drill-code")
        buttons = [self._button(label, action) for label, action in (
            ("Check", self.check), ("Reveal one", self.reveal_one),
            ("Reveal all", self.reveal_all), ("Refresh", self.refresh))]
        self.message = w.HTML()
        self.verdicts = w.HTML()
        self.mastery = w.HTML()
        forget = self._button("Forget my weak spots", self.forget)
        super().__init__([w.HTML(STYLE), w.HBox([self.picker, self.count, self.summary]),
                          self.code, w.HBox(buttons), self.message, self.verdicts,
                          self.mastery, forget])
        self.add_class("distlab-drill")
        self._limit(blanks)
        self.picker.observe(self._new_snippet, "value")
        self.draw()
        self._show_mastery()

    def _note(self) -> str:
        if self.checker.text_only:
            return f"Note: {self.checker.text_only}; answers are checked by text only."
        return ""

    def _button(self, label: str, action) -> w.Button:
        button = w.Button(description=label, layout=w.Layout(width="auto"))
        button.on_click(lambda _: action())
        return button

    def _limit(self, wanted: int) -> None:
        """The blank count: at most as many as fit in this snippet."""
        self.positions = maskable(self.snippets[self.picker.value].source, self.picker.value)
        most = len(fitting(self.positions))
        self.count.unobserve(self._recount, "value")  # one draw for the new snippet, not two
        self.count.max, self.count.value = most, max(1, min(wanted, most))
        self.count.observe(self._recount, "value")
        self.checker.warm(self.snippets[self.picker.value])

    def _recount(self, _=None) -> None:
        self.draw()

    def _new_snippet(self, _=None) -> None:
        self._limit(self.count.value)
        self.draw()

    def draw(self) -> None:
        """Show the current snippet with the blanks of the current seed."""
        name = self.picker.value
        try:
            self.snippet, self.positions, self.chosen = draw(name, self.count.value, self.seed)
        except DrillError as err:
            self.message.value = f"<span style='color: var(--jp-error-color1)'>{err}</span>"
            return
        self.inputs, self.marks = [], []
        self.revealed: set[int] = set()
        self.judged: dict[int, tuple[str, bool]] = {}  # blank -> (the answer checked, right?)
        self.missed: set[int] = set()  # blanks this draw has counted as missed already
        self.message.value = self._note()
        rows, plain = [], []
        for line in template(self.snippet.source, self.chosen):
            if not any(isinstance(piece, int) for piece in line):
                plain.append("".join(line))
                continue
            if plain:  # consecutive lines without blanks: one block
                rows.append(_pre("\n".join(plain)))
                plain = []
            rows.append(w.HBox([self._blank(piece) if isinstance(piece, int) else _pre(piece)
                                for piece in line]))
        if plain:
            rows.append(_pre("\n".join(plain)))
        self.code.children = rows
        self.summary.value = f"{len(self.positions)} maskable | " \
                             f"{len(self.chosen)} masked &nbsp; (seed {self.seed})"
        self.verdicts.value = ""

    def _blank(self, index: int) -> w.HBox:
        box = w.Text(placeholder=f"[{index + 1}]", layout=w.Layout(width="auto"))
        box.add_class("drill-blank")
        mark = w.HTML("").add_class("drill-mark")
        box.observe(lambda change, i=index: self._edited(i, change["new"]), "value")
        self.inputs.append(box)
        self.marks.append(mark)
        number = w.HTML(f"<span class='drill-number'>{index + 1}</span>")
        return w.HBox([number, box, mark])

    def refresh(self) -> None:
        """A new random set of blanks."""
        self.seed += 1
        self.draw()

    def check(self) -> None:
        todo = [i for i in range(len(self.chosen)) if i not in self.revealed]
        self.message.value = "checking…"
        try:
            verdicts = self.checker.check(self.snippet, [self.chosen[i] for i in todo],
                                          [self.inputs[i].value for i in todo])
        except DrillError as err:
            self.message.value = f"<span style='color: var(--jp-error-color1)'>{err}</span>"
            return
        self._record(todo, verdicts)
        lines = []
        for index, verdict in zip(todo, verdicts, strict=True):
            self.marks[index].value = MARKS[verdict.status]
            self.inputs[index].tooltip = verdict.why
            lines.append(f"[{index + 1}] {MARKS[verdict.status]} "
                         f"{html.escape(verdict.why)}")
        right = sum(v.right for v in verdicts)
        self.message.value = f"{right} of {len(verdicts)} right" + (
            f" ({len(self.revealed)} revealed)" if self.revealed else "")
        self.verdicts.value = "<br>".join(lines)
        self._show_mastery()

    def _edited(self, index: int, value: str) -> None:
        """A box changed: its old verdict no longer holds (a reveal's own change aside)."""
        if index not in self.revealed and self.judged.get(index, (value,))[0] != value:
            self.judged.pop(index, None)
            self.marks[index].value = ""
            self.inputs[index].tooltip = ""

    def _record(self, todo: list[int], verdicts) -> None:
        """Tell the history: a right answer, or a miss not counted yet in this draw."""
        results = {}
        for index, verdict in zip(todo, verdicts, strict=True):
            self.judged[index] = (self.inputs[index].value, verdict.right)
            if verdict.status not in (RIGHT, WRONG, INVALID):
                continue
            if verdict.right:
                results[self.chosen[index].key] = True
            elif index not in self.missed:
                self.missed.add(index)
                results[self.chosen[index].key] = False
        history.record(self.snippet.name, results)

    def _reveal(self, index: int) -> None:
        if index not in self.missed:  # missed at a Check already: not a second miss
            self.missed.add(index)
            history.record(self.snippet.name, {self.chosen[index].key: False})
        self.revealed.add(index)  # the history first: what the learner sees is then recorded
        self.inputs[index].value = self.chosen[index].text
        self.inputs[index].disabled = True
        self.marks[index].value = MARKS["revealed"]

    def _unsolved(self) -> list[int]:
        """Blanks neither revealed nor right as they now read."""
        return [i for i in range(len(self.chosen)) if i not in self.revealed
                and self.judged.get(i) != (self.inputs[i].value, True)]

    def reveal_one(self) -> None:
        left = self._unsolved()
        if left:
            self._reveal(left[0])
        self._show_mastery()

    def reveal_all(self) -> None:
        for index in self._unsolved():
            self._reveal(index)
        self._show_mastery()

    def forget(self) -> None:
        history.reset(self.snippet.name)
        self.message.value = f"forgot the weak spots of {self.snippet.name}"
        self._show_mastery()

    def _show_mastery(self) -> None:
        """Bars: the mastery of each snippet, the current one in bold."""
        rows = []
        for name, snippet in self.snippets.items():
            share = history.mastery(name, [p.key for p in maskable(snippet.source, name)])
            weight = "bold" if name == self.picker.value else "normal"
            rows.append(
                f"<tr style='font-weight: {weight}'><td>{name}</td><td style='width: 200px'>"
                f"<div style='background: var(--jp-brand-color1); height: 10px; "
                f"width: {share * 100:.0f}%'></div></td><td>{share:.0%}</td></tr>")
        self.mastery.value = "<b>mastery</b> (positions right at their last check)" \
                             f"<table class='drill-mastery'>{''.join(rows)}</table>"

    def close(self) -> None:
        self.checker.close()
        super().close()
