"""The explanation a check reveals once it passes: a notebook's "Why" cells, kept out of the
released notebook and shown by the check cell that ends with `reveal("<name>")`.

../shared/BLANKS.md orders a section problem, exercise, check, then why. A "Why" cell in the
notebook would stand on the learner's screen before they solve the exercise (a scroll away),
and a good explanation names the mechanism the blank asks for. So the solved source marks it

    # %% [markdown] why="row_parallel_forward"
    # **Why.** ...

`python -m autograder.release` drops such cells from the learner's notebook and stores their
text, compressed, in distlab/whys.z; the check cell's last line, `reveal("row_parallel_forward")`,
runs only when every assert above it held, and shows the text as the cell's output.
"""

from __future__ import annotations

import json
import zlib
from pathlib import Path

STORE = Path(__file__).with_name("whys.z")


def encode(whys: dict) -> bytes:
    """{name: {"notebook": id, "text": markdown}} as the store's bytes (deterministic)."""
    return zlib.compress(json.dumps(whys, sort_keys=True, ensure_ascii=False).encode(), 9)


def load(store: Path = STORE) -> dict:
    if not store.exists():
        return {}
    return json.loads(zlib.decompress(store.read_bytes()).decode())


def reveal(name: str) -> None:
    """Show the "Why" of `name` (called by a check cell after its asserts)."""
    whys = load()
    if name not in whys:
        raise KeyError(f"no explanation named {name!r} in {STORE.name}: run "
                       "`python -m autograder.release` after editing a solved source")
    text = whys[name]["text"]
    try:
        from IPython import get_ipython
    except ImportError:
        get_ipython = None
    if get_ipython is not None and get_ipython() is not None:
        from IPython.display import Markdown, display

        display(Markdown(text))
    else:
        print(text)
