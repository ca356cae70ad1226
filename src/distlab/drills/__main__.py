"""Drills from a terminal.

    python -m distlab.drills list                                # snippets, positions, mastery
    python -m distlab.drills write ring_allreduce --seed 3 --blanks 5 -o drill.ipynb
    python -m distlab.drills check drill.ipynb [--reveal]         # a verdict per blank
    python -m distlab.drills reset [SNIPPET]                      # forget the weak spots
    python -m distlab.drills serve [--stop]                      # the warm checker (below)

`write` draws the blanks from the seed and your weak-spot history (the same seed and history
give the same blanks; `--ignore-history` draws from the seed alone) into a notebook with one
code cell; fill its `_____`s and run `check`. It exits 0 when every blank is right, 1 when one
is not, 2 on input it cannot use (the message says why).

An answer equal to the reference's text is judged in `check`'s own process at once. Others go
to a warm checker that `write` or the first `check` starts in the background (`serve`: one
judge runner per notebook, kept warm, gone after 15 idle minutes; server.py), so a check that
runs the hidden test takes a warm judge's second rather than a cold start's ten.
DISTLAB_DRILLS_SERVER=0 judges in `check`'s own process instead.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
import sys
from pathlib import Path

import nbformat
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

from distlab.drills import Checker, DrillError, draw, history, load, maskable, record, server
from distlab.drills.check import Verdict, normalise
from distlab.drills.positions import template
from distlab.drills.snippets import get

BLANK = "_____"
KEY = "distlab_drill"  # notebook and cell metadata
KERNELSPEC = {"name": "python3", "display_name": "Python 3 (ipykernel)", "language": "python"}
NUMBERS = re.compile(r"\s*#\s*\[\d+\](?:,\s*\[\d+\])*\s*$")  # the `# [1], [2]` we append
MARK = {"right": "✓", "wrong": "✗", "invalid": "✗", "empty": "·", "differs": "?"}


def _digest(source: str) -> str:
    return hashlib.sha256(source.encode()).hexdigest()[:16]


def cell_text(lines: list[list]) -> str:
    """The drill's code: each blank `_____`, each line with blanks numbered in a comment."""
    out, number = [], 0
    for line in lines:
        blanks = [piece for piece in line if isinstance(piece, int)]
        text = "".join(BLANK if isinstance(piece, int) else piece for piece in line)
        numbers = ", ".join(f"[{number + k + 1}]" for k in range(len(blanks)))
        number += len(blanks)
        out.append(f"{text}  # {numbers}" if blanks else text)
    return "\n".join(out)


def read_answers(filled: str, lines: list[list]) -> list[str]:
    """The answers written into the drill's cell, in blank order."""
    text = "\n".join(NUMBERS.sub("", line).rstrip() for line in filled.strip("\n").split("\n"))
    pattern = ""
    for line in lines:
        for piece in line:
            pattern += r"([^\n]*?)" if isinstance(piece, int) else \
                re.sub(r"(\\\s)+", r"[ \\t]*", re.escape(piece))
        pattern += r"[ \t]*\n"
    match = re.fullmatch(pattern.removesuffix(r"[ \t]*\n"), text.rstrip())
    if match is None:
        raise DrillError("the drill's code was changed outside its blanks, so the answers "
                         "cannot be read back: write the drill again and change only the "
                         f"{BLANK}s")
    return ["" if answer.strip() == BLANK else answer.strip() for answer in match.groups()]


def write(name: str, seed: int, blanks: int, out: Path, ignore_history: bool = False) -> str:
    snippet, positions, chosen = draw(name, blanks, seed, ignore_history)
    lines = template(snippet.source, chosen)
    summary = f"{len(positions)} maskable | {len(chosen)} masked"
    notebook = new_notebook(
        metadata={"kernelspec": KERNELSPEC, "language_info": {"name": "python"},
                  KEY: {"snippet": name, "seed": seed, "source": _digest(snippet.source),
                        "spans": [[p.start, p.end] for p in chosen]}},
        cells=[
            new_markdown_cell(
                f"# Drill: `{name}` ({snippet.assignment})\n\nseed {seed}: {summary}. Replace "
                f"each `{BLANK}` with the code that stood there, then run\n"
                f"`python -m distlab.drills check {out.name}`.", id="drill-intro"),
            new_code_cell(cell_text(lines), id="drill-code", metadata={KEY: True}),
        ])
    # nbformat.write would store each source as a list of lines; one string a cell is as valid
    # and what a learner's diff and the tests read
    out.write_text(json.dumps(notebook, indent=1, ensure_ascii=False) + "\n")
    server.ask({"op": "warm", "snippet": name}, timeout=10)  # warm by the time you check
    return f"wrote {out}: {name}, seed {seed}, {summary}"


def _drill_of(path: Path):
    """(snippet, chosen positions, answers) of a drill notebook written by `write`."""
    try:
        notebook = nbformat.read(path, as_version=4)
        meta = notebook.metadata[KEY]
        cell = next(c for c in notebook.cells if c.metadata.get(KEY))
    except (OSError, ValueError, KeyError, AttributeError, StopIteration,
            nbformat.ValidationError) as err:
        raise DrillError(f"{path} is not a drill notebook written by `write` "
                         f"({type(err).__name__}: {err})") from None
    snippet = get(meta["snippet"])
    if _digest(snippet.source) != meta["source"]:
        raise DrillError(f"{meta['snippet']} changed in the solved source since {path} was "
                         "written: write a new drill")
    by_span = {(p.start, p.end): p for p in maskable(snippet.source, snippet.name)}
    chosen = sorted(by_span[tuple(span)] for span in meta["spans"])
    return snippet, chosen, read_answers(cell.source, template(snippet.source, chosen))


def _judge(snippet, chosen, answers) -> tuple[list[Verdict], str]:
    """(verdicts, why text only or ""): answers equal to the reference's text here at once,
    the others by the warm drill server (server.py), else by a Checker of this process."""
    if all(normalise(a.strip()) == normalise(p.text) for p, a in zip(chosen, answers,
                                                                      strict=True)):
        return [Verdict(a.strip(), "right", "as the reference") for a in answers], ""
    reply = server.ask({"op": "check", "snippet": snippet.name,
                        "spans": [[p.start, p.end] for p in chosen], "answers": answers})
    if reply and "verdicts" in reply:
        return [Verdict(*v) for v in reply["verdicts"]], reply["text_only"]
    checker = Checker()
    try:
        return checker.check(snippet, chosen, answers), checker.text_only
    finally:
        checker.close()


def check(path: Path, reveal: bool = False) -> tuple[str, bool]:
    """(the report, every blank right?) of a filled drill notebook; the history learns it."""
    snippet, chosen, answers = _drill_of(path)
    verdicts, text_only = _judge(snippet, chosen, answers)
    record(snippet, chosen, verdicts)
    lines = [f"{snippet.name} ({snippet.assignment}): {len(chosen)} blanks"]
    if text_only:
        lines.append(f"note: {text_only}: answers are checked by text only")
    for number, (position, verdict) in enumerate(zip(chosen, verdicts, strict=True), start=1):
        shown = verdict.answer or BLANK
        lines.append(f"[{number}] {MARK[verdict.status]} {shown}  -- {verdict.why}")
        if reveal and not verdict.right:
            lines.append(f"      the reference: {position.text}")
    right = sum(v.right for v in verdicts)
    keys = [p.key for p in maskable(snippet.source, snippet.name)]
    lines.append(f"{right} of {len(chosen)} right; mastery of {snippet.name}: "
                 f"{history.mastery(snippet.name, keys):.0%}")
    return "\n".join(lines), right == len(chosen)


def listing() -> str:
    rows = []
    for name, snippet in load().items():
        keys = [p.key for p in maskable(snippet.source, snippet.name)]
        rows.append(f"{name:<28} {snippet.assignment:<22} {len(keys):>4} maskable positions"
                    f"   mastery {history.mastery(name, keys):>4.0%}")
    return "\n".join(rows) or "no snippets: drills.toml opens no notebook, or no solved sources"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m distlab.drills",
                                     description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("list", help="the snippets, their maskable positions and your mastery")
    writer = commands.add_parser("write", help="write a drill notebook")
    writer.add_argument("snippet")
    writer.add_argument("--seed", type=int, default=0)
    writer.add_argument("--blanks", type=int, default=5)
    writer.add_argument("--ignore-history", action="store_true",
                        help="draw from the seed alone, not weighted by your misses")
    writer.add_argument("-o", "--output", type=Path, help="default: drill_<snippet>.ipynb")
    checker = commands.add_parser("check", help="check a filled drill notebook")
    checker.add_argument("notebook", type=Path)
    checker.add_argument("--reveal", action="store_true", help="show the reference of a miss")
    serving = commands.add_parser("serve", help="the warm checker `check` asks (started by "
                                  "itself; --stop stops it)")
    serving.add_argument("--stop", action="store_true")
    resetter = commands.add_parser("reset", help="forget your weak spots")
    resetter.add_argument("snippet", nargs="?", help="default: every snippet")
    args = parser.parse_args(argv)
    try:
        if args.command == "list":
            print(listing())
        elif args.command == "write":
            print(write(args.snippet, args.seed, args.blanks,
                        args.output or Path(f"drill_{args.snippet}.ipynb"), args.ignore_history))
        elif args.command == "serve":
            if args.stop:
                print("stopped the drill server" if server.stop() else "no drill server runs")
            else:
                server.serve()
        elif args.command == "check":
            report, all_right = check(args.notebook, args.reveal)
            print(report)
            return 0 if all_right else 1
        else:
            if args.snippet:
                get(args.snippet)  # an unknown name says so, rather than resetting nothing
            history.reset(args.snippet)
            print(f"forgot the weak spots of {args.snippet or 'every snippet'}")
    except DrillError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
