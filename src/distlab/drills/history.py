"""The learner's weak spots: per snippet and position, how often it was missed, and whether
its last check was right. A small SQLite file in the user's data folder, never in the course:
`$DISTLAB_DRILLS_DB`, else `$XDG_DATA_HOME/distlab/drills.sqlite` (~/.local/share/...).

A miss adds one; a right answer takes one back, so a position learnt is drawn as often as
the others again.
"""

from __future__ import annotations

import contextlib
import sqlite3
from pathlib import Path

from distlab.source import settings

SCHEMA = """CREATE TABLE IF NOT EXISTS positions (
    snippet TEXT, position TEXT, misses INTEGER, last_right INTEGER,
    PRIMARY KEY (snippet, position))"""


def path() -> Path:
    return settings.drills_db()


@contextlib.contextmanager
def _connect():
    """A connection, committed and closed after the block."""
    db = path()
    db.parent.mkdir(parents=True, exist_ok=True)
    connection = sqlite3.connect(db)
    try:
        with connection:  # commits, or rolls back on an error
            connection.execute(SCHEMA)
            yield connection
    finally:
        connection.close()


def misses(snippet: str) -> dict[str, int]:
    """{position key: misses} of the positions of `snippet` missed and not yet made up for."""
    with _connect() as db:
        rows = db.execute("SELECT position, misses FROM positions WHERE snippet = ? AND "
                          "misses > 0", (snippet,)).fetchall()
    return dict(rows)


def record(snippet: str, results: dict[str, bool]) -> None:
    """Remember one check: {position key: right?}."""
    with _connect() as db:
        for key, right in results.items():
            db.execute(
                "INSERT INTO positions VALUES (?, ?, ?, ?) ON CONFLICT (snippet, position) DO "
                "UPDATE SET misses = max(0, misses + ?), last_right = ?",
                (snippet, key, 0 if right else 1, int(right), -1 if right else 1, int(right)))


def mastery(snippet: str, keys: list[str]) -> float:
    """The share of the snippet's positions (`keys`) whose last check was right."""
    if not keys:
        return 0.0
    with _connect() as db:
        right = {key for (key,) in db.execute(
            "SELECT position FROM positions WHERE snippet = ? AND last_right = 1", (snippet,))}
    return len(right & set(keys)) / len(keys)


def reset(snippet: str | None = None) -> None:
    """Forget the history of one snippet, or of all."""
    with _connect() as db:
        if snippet is None:
            db.execute("DELETE FROM positions")
        else:
            db.execute("DELETE FROM positions WHERE snippet = ?", (snippet,))
