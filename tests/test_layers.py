"""Do the layers go one way? distlab, what learners install, never imports the grading side
(autograder: hidden tests, references, oracles), and its wheel holds none of it."""

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_the_import_contracts_hold():
    """lint-imports ([tool.importlinter] in pyproject.toml): distlab -> autograder is
    forbidden, autograder sits on distlab, distlab.source is the bottom of distlab, no import
    cycle (lazy imports included), the rank launcher and autograder's layers go one way, the
    judge at the bottom. Every contract is counted: none is skipped."""
    contracts = (ROOT / "pyproject.toml").read_text().count("\n[[tool.importlinter.contracts]]\n")
    lint = Path(sys.executable).with_name("lint-imports")
    result = subprocess.run([str(lint)], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"{contracts} kept, 0 broken" in result.stdout, result.stdout


def test_the_learners_wheel_holds_distlab_and_nothing_of_the_grading_side(tmp_path):
    """The wheel of src/ (built offline from a copy, as a hub's image would install it): every
    distlab module and the drills' verdicts, no autograder, solutions or tests."""
    source = tmp_path / "src"
    shutil.copytree(ROOT / "src", source, ignore=shutil.ignore_patterns(
        "build", "*.egg-info", "__pycache__"))
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps",
                    "--no-build-isolation", str(source), "-w", str(tmp_path / "wheels")],
                   check=True, capture_output=True, timeout=300)
    [wheel] = (tmp_path / "wheels").glob("distlab-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    tops = {name.split("/")[0] for name in names}
    assert tops == {"distlab", wheel.name.removesuffix("-py3-none-any.whl") + ".dist-info"}
    modules = {str(p.relative_to(ROOT / "src")) for p in (ROOT / "src" / "distlab").rglob("*.py")}
    assert modules <= set(names)
    assert {"distlab/source/markers.py", "distlab/judges.py",
            "distlab/drills/verdicts.json"} <= set(names)
    forbidden = ("autograder", "solutions", "tests", "exercises", "reference", "oracle",
                 "hidden", "grade_cell", "drill_judge")
    assert [n for n in names if any(word in n for word in forbidden)] == []
