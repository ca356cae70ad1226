"""MathToMathML: the maths of markdown cells as MathML, which browsers draw without MathJax.

nbconvert's HTML leaves `$...$` for MathJax, loaded from a CDN: a learner who opens the feedback
page offline sees raw TeX. Here each formula (`$$...$$`, `\\[...\\]`, `$...$`, `\\(...\\)`) becomes
a `<math>` element, which the markdown renderer passes through as inline HTML. Code spans,
fenced code and an escaped `\\$` are left alone, and so is a formula latex2mathml cannot convert
(it stays TeX, as text, and the log names its cell).
"""

import re

from latex2mathml.converter import convert
from nbconvert.preprocessors import Preprocessor
from traitlets import Bool

# One pass, left to right: the first alternative that matches at a position wins, so `$` inside
# code is never read as maths, and an escaped `\$` (or `\\`) never opens a formula.
TOKEN = re.compile(r"""
    (?P<fence>^[ \t]*(?P<mark>`{3,}|~{3,}).*?(?:^[ \t]*(?P=mark)[`~]*[ \t]*$|\Z))
  | (?P<code>(?P<ticks>`+)(?!`).+?(?<!`)(?P=ticks)(?!`))
  | (?P<escape>\\[\\$])
  | \$\$(?P<display>.+?)\$\$
  | \\\[(?P<bracket>.+?)\\\]
  | \\\((?P<paren>.+?)\\\)
  | \$(?P<inline>(?![\s$])(?:[^$\\\n]|\\.|\n(?![ \t]*\n))+?(?<!\s))\$(?!\d)
""", re.VERBOSE | re.DOTALL | re.MULTILINE)

# latex2mathml keeps an unknown command as an identifier (`<mi>\foo</mi>`): not converted.
UNKNOWN_COMMAND = re.compile(r">\\[A-Za-z]")
# Text between tags: a character markdown would act on (`*`, `_`, `|`, ...) becomes a reference.
TEXT = re.compile(r">([^<]+)<")
PLAIN = re.compile(r"(&#x?[0-9A-Fa-f]+;|[^\W_]| )|(.)", re.DOTALL)


def _escaped(text: str) -> str:
    return PLAIN.sub(lambda m: m.group(1) or f"&#{ord(m.group(2))};", text)


def to_mathml(tex: str, display: bool) -> str | None:
    """`tex` as one line of MathML, or None where latex2mathml cannot convert it."""
    try:
        mathml = convert(tex.strip(), display="block" if display else "inline")
    except Exception:  # noqa: BLE001 (a third-party parser on learners' text: any failure)
        return None
    if UNKNOWN_COMMAND.search(mathml):
        return None
    # No namespace URL in the page (HTML knows <math>), and one line: markdown ends a paragraph
    # at a blank line, and a line of its own could be read as the start of an HTML block.
    mathml = mathml.replace(' xmlns="http://www.w3.org/1998/Math/MathML"', "")
    return TEXT.sub(lambda m: f">{_escaped(m.group(1))}<", mathml.replace("\n", " "))


def markdown_with_mathml(source: str) -> tuple[str, list[str]]:
    """The markdown with each formula in MathML, and the formulas that stayed TeX."""
    failed = []

    def replace(match):
        display = match.group("display") or match.group("bracket")
        tex = display if display is not None else match.group("paren") or match.group("inline")
        if tex is None:  # code or an escape
            return match.group()
        mathml = to_mathml(tex, display is not None)
        if mathml is None:
            failed.append(match.group())
            return match.group()
        return mathml

    return TOKEN.sub(replace, source), failed


class MathToMathML(Preprocessor):
    """Replace the TeX of markdown cells with MathML."""

    # nbconvert's preprocessors are off unless enabled (nbgrader's are on, as here)
    enabled = Bool(True, help="Use this preprocessor").tag(config=True)

    def preprocess_cell(self, cell, resources, index):
        if cell.cell_type == "markdown":
            cell.source, failed = markdown_with_mathml(cell.source)
            for tex in failed:
                self.log.warning("Cell %d: maths kept as TeX (latex2mathml cannot convert "
                                 "it): %s", index, tex)
        return cell, resources
