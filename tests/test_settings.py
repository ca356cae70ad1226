"""Is every DISTLAB_* environment variable read in one place (distlab/source/settings.py), at
call time, with the default its docstring and README.md's "Settings" table give?"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from distlab.source import settings

ROOT = settings.ROOT
SETTINGS = Path(settings.__file__).resolve()
NAME = re.compile(r"DISTLAB_[A-Z0-9_]+")


def names_in(source: str) -> set[str]:
    """The DISTLAB_* names a module spells as a whole string (docstrings and messages that
    mention one in a sentence are longer strings, and do not count)."""
    return {node.value for node in ast.walk(ast.parse(source))
            if isinstance(node, ast.Constant) and isinstance(node.value, str)
            and NAME.fullmatch(node.value)}


def test_no_module_but_settings_names_a_distlab_variable():
    """Does any module of distlab, autograder or nbgrader_config.py read (or write) a DISTLAB_*
    variable by its own spelling of the name, rather than through distlab.source.settings?"""
    files = [*(ROOT / "src" / "distlab").rglob("*.py"), *(ROOT / "autograder").rglob("*.py"),
             *(ROOT / "solutions").glob("*/hidden_tests*.py"), ROOT / "nbgrader_config.py"]
    offenders = {f"{path.relative_to(ROOT)}: {sorted(found)}" for path in files
                 if path.resolve() != SETTINGS and (found := names_in(path.read_text()))}
    assert not offenders, offenders
    assert names_in('import os\nos.environ.get("DISTLAB_SLOT", "0")') == {"DISTLAB_SLOT"}
    assert names_in('"""Set DISTLAB_SLOT to move it."""') == set()


def test_every_setting_is_in_the_readme_table():
    """Does README.md's Settings table name every variable settings.py reads?"""
    readme = (ROOT / "README.md").read_text()
    table = readme[readme.index("## Settings"):].split("\n## ")[0]
    assert names_in(SETTINGS.read_text()) == set(NAME.findall(table))


def test_settings_are_read_when_called_with_their_defaults(monkeypatch, tmp_path):
    """Does each function see the environment as it is now, and give its default when unset?"""
    for name in names_in(SETTINGS.read_text()):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    assert settings.solutions_dir() == ROOT / "solutions"
    assert settings.grading_dir() == ROOT / "grading"
    assert settings.exchange_dir() == ROOT / "grading" / "exchange"
    assert settings.gradebook_url() == f"sqlite:///{ROOT / 'grading' / 'gradebook.db'}?timeout=60"
    assert settings.drills_db() == tmp_path / "data" / "distlab" / "drills.sqlite"
    assert settings.drills_run_dir().name.startswith("distlab-drills-")
    assert settings.drills_server() and not settings.judged()
    assert (settings.student(), settings.slot(), settings.sandbox_first_uid()) == ("", 0, 60100)

    monkeypatch.setenv("DISTLAB_GRADING_DIR", str(tmp_path / "g"))
    monkeypatch.setenv("DISTLAB_SOLUTIONS_DIR", str(tmp_path / "s"))
    monkeypatch.setenv("DISTLAB_DRILLS_DB", str(tmp_path / "d.sqlite"))
    monkeypatch.setenv("DISTLAB_DRILLS_RUN", str(tmp_path / "run"))
    monkeypatch.setenv("DISTLAB_DRILLS_SERVER", "0")
    monkeypatch.setenv("DISTLAB_STUDENT", "alice")
    monkeypatch.setenv(settings.JUDGE, "1")
    monkeypatch.setenv(settings.SLOT, "3")
    monkeypatch.setenv("DISTLAB_SANDBOX_FIRST_UID", "60500")
    assert settings.grading_dir() == tmp_path / "g"
    assert settings.exchange_dir() == tmp_path / "g" / "exchange"
    assert settings.solutions_dir() == tmp_path / "s"
    assert settings.drills_db() == tmp_path / "d.sqlite"
    assert settings.drills_run_dir() == tmp_path / "run"
    assert not settings.drills_server() and settings.judged()
    assert (settings.student(), settings.slot(), settings.sandbox_first_uid()) == ("alice", 3,
                                                                                  60500)
    monkeypatch.setenv("DISTLAB_EXCHANGE", str(tmp_path / "x"))
    monkeypatch.setenv("DISTLAB_DB_URL", "postgresql://u@h/distlab")
    assert settings.exchange_dir() == tmp_path / "x"
    assert settings.gradebook_url() == "postgresql://u@h/distlab"


def test_a_setting_that_is_not_a_number_names_itself(monkeypatch):
    monkeypatch.setenv("DISTLAB_SLOT", "two")
    with pytest.raises(ValueError, match="DISTLAB_SLOT='two' is not a whole number"):
        settings.slot()
