"""Do the places that name dependencies agree (distlab's src/pyproject.toml, the course's
pyproject.toml, environment.yml, the Makefile's torch)?"""

import re
import subprocess
import sys
from pathlib import Path

import tomllib
import yaml

ROOT = Path(__file__).resolve().parents[1]


def _pyproject(where="pyproject.toml"):
    return tomllib.loads((ROOT / where).read_text())["project"]


def _dependencies():
    """Both projects' dependencies, dev included, but distlab itself (the course's on src/)."""
    course = _pyproject()
    return [*_pyproject("src/pyproject.toml")["dependencies"], *course["dependencies"],
            *course["optional-dependencies"]["dev"]]


def _conda_pip():
    env = yaml.safe_load((ROOT / "environment.yml").read_text())
    pip = next(d["pip"] for d in env["dependencies"] if isinstance(d, dict))
    return [line for line in pip if not line.startswith("-")]


def test_environment_yml_lists_what_pyproject_lists():
    """Does environment.yml install exactly both projects' dependencies (dev included), and
    both projects?"""
    wanted = {d for d in _dependencies() if not d.startswith(("torch", "distlab"))}
    conda = [d for d in _conda_pip() if not d.startswith("torch")]
    assert sorted(conda) == sorted(wanted)  # once each: nbformat is both projects'
    env = yaml.safe_load((ROOT / "environment.yml").read_text())
    pip = next(d["pip"] for d in env["dependencies"] if isinstance(d, dict))
    assert {"--editable ./src", "--editable ."} <= set(pip)


def test_the_course_depends_on_the_learners_package_at_its_version():
    assert f"distlab=={_pyproject('src/pyproject.toml')['version']}" in _pyproject()["dependencies"]


def test_torch_pin_is_the_makefiles():
    """Is torch pinned to the Makefile's TORCH_VERSION, and within pyproject's range?"""
    version = re.search(r"^TORCH_VERSION \?= (\S+)", (ROOT / "Makefile").read_text(), re.M)[1]
    assert f"torch=={version}" in _conda_pip()
    torch_range = next(d for d in _pyproject("src/pyproject.toml")["dependencies"]
                       if d.startswith("torch"))
    minimum = re.search(r">=([\d.]+)", torch_range)[1]
    assert tuple(map(int, version.split("."))) >= tuple(map(int, minimum.split(".")))


def test_ci_runs_the_readme_test_command():
    """Does .ci/run call `make test`, the command README gives?"""
    assert "make test" in (ROOT / ".ci" / "run").read_text()
    assert "make test" in (ROOT / "README.md").read_text()


def test_reading_a_notebook_builds_no_iri_parsers():
    """Does a process that reads a notebook or starts nbgrader skip rfc3987-syntax (38 lark
    parsers, 1.3-1.9 s of CPU each time: pyproject.toml's bound on jsonschema says why)?"""
    code = "import sys, nbformat.validator, nbgrader.apps; print('rfc3987_syntax' in sys.modules)"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.stdout.strip() == "False", result.stdout + result.stderr
