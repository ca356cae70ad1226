"""Do the three places that name dependencies agree?"""

import re
from pathlib import Path

import tomllib
import yaml

ROOT = Path(__file__).resolve().parents[1]


def _pyproject():
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]


def _conda_pip():
    env = yaml.safe_load((ROOT / "environment.yml").read_text())
    pip = next(d["pip"] for d in env["dependencies"] if isinstance(d, dict))
    return [line for line in pip if not line.startswith("-")]


def test_environment_yml_lists_what_pyproject_lists():
    """Does environment.yml install exactly pyproject's dependencies (dev included)?"""
    project = _pyproject()
    wanted = [d for d in project["dependencies"] if not d.startswith("torch")]
    wanted += project["optional-dependencies"]["dev"]
    conda = [d for d in _conda_pip() if not d.startswith("torch")]
    assert sorted(conda) == sorted(wanted)


def test_torch_pin_is_the_makefiles():
    """Is torch pinned to the Makefile's TORCH_VERSION, and within pyproject's range?"""
    version = re.search(r"^TORCH_VERSION \?= (\S+)", (ROOT / "Makefile").read_text(), re.M)[1]
    assert f"torch=={version}" in _conda_pip()
    torch_range = next(d for d in _pyproject()["dependencies"] if d.startswith("torch"))
    minimum = re.search(r">=([\d.]+)", torch_range)[1]
    assert tuple(map(int, version.split("."))) >= tuple(map(int, minimum.split(".")))


def test_ci_runs_the_readme_test_command():
    """Does .ci/run call `make test`, the command README gives?"""
    assert "make test" in (ROOT / ".ci" / "run").read_text()
    assert "make test" in (ROOT / "README.md").read_text()
