# Every target creates .venv first if it is missing, so a fresh clone needs only `make lab`
# or `make test`. TORCH_VERSION picks the torch build (default: the CPU wheel of 2.13.0);
# e.g. `make setup TORCH_VERSION=2.14.1 TORCH_INDEX=https://download.pytorch.org/whl/cu128`.
PYTHON ?= python3
TORCH_VERSION ?= 2.13.0
TORCH_INDEX ?=
LAB_ARGS ?=
VENV := .venv
BIN := $(VENV)/bin
# nbgrader starts alembic as a program: the venv's bin/ must be on PATH
export PATH := $(abspath $(BIN)):$(PATH)
ROOT_FLAG := $(if $(filter 0,$(shell id -u)),--allow-root,)

.PHONY: setup lab test test-all quick strength release grade report bench gpu-check lint clean

setup: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml src/pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet "torch==$(TORCH_VERSION)" $(if $(TORCH_INDEX),--index-url $(TORCH_INDEX))
	@# src/ is distlab, the learner's package; the root project is the course's grading side
	@# (autograder) and dev tools on top of it. setuptools warns on every editable install of
	@# a package at the top level: not news
	PYTHONWARNINGS=ignore $(BIN)/python -m pip install --quiet -e ./src -e ".[dev]"
	touch $@

# The learner's JupyterLab, configured by lab-config/ (on JUPYTER_CONFIG_PATH for this target
# only): it opens notebooks/01_collectives, with nbgrader's Validate button and without its
# instructor menus. LAB_ARGS adds options, e.g. `make lab LAB_ARGS="--no-browser --port=9999"`;
# tests/test_lab.py starts the server this way.
lab: setup
	JUPYTER_CONFIG_PATH="$(CURDIR)/lab-config$${JUPYTER_CONFIG_PATH:+:$$JUPYTER_CONFIG_PATH}" \
		$(BIN)/jupyter lab $(ROOT_FLAG) $(LAB_ARGS)

# Three lanes on 2 cores (pytest-xdist; tests/conftest.py says why and how the work is split).
LANES ?= -n 3

# Everything, as CI runs it: unit tests, the slow system tests under tests/system/ (real
# grading batches, Lab servers, the browser when a chromium is installed) and the
# blank-strength check on every notebook (one generated wrong answer per blank and every
# hand-written one must fail its test; test-all: every wrong answer of every kind).
test: setup
	$(BIN)/lint-imports
	$(BIN)/python -m pytest $(LANES) --durations=20

# make test with the exhaustive strength check (every mutant of every blank, not one of each
# kind per blank): what CI does not need, but an author changing a hidden test should run
test-all: setup
	$(BIN)/lint-imports
	$(BIN)/python -m pytest $(LANES) --durations=20 --exhaustive

# The blank-strength check alone, with its report: `make strength IDS=01_collectives`.
strength: setup
	$(BIN)/python -m autograder.strength --jobs 2 $(IDS)

# The edit loop: the unit tests only (tests marked slow are skipped).
quick: setup
	$(BIN)/python -m pytest $(LANES) -m "not slow"

release: setup
	$(BIN)/python -m autograder.release

grade: setup
	$(BIN)/python -m autograder.batch

# After make grade: which blanks the class missed, grading/reports/<id>.html per notebook and
# a summary. Students are anonymous labels; `make report NAMES=1 IDS=01_collectives` names them.
report: setup
	$(BIN)/python -m autograder.report $(if $(NAMES),--names) $(IDS)

bench: setup
	$(BIN)/python -m bench

# Every path only a GPU machine takes (launcher on CUDA, NCCL, the torchrun scripts, the solved
# notebooks), one line each; without a GPU it says so and exits 0. Needs a CUDA build of torch:
# make setup TORCH_VERSION=... TORCH_INDEX=https://download.pytorch.org/whl/cu128
gpu-check: setup
	$(BIN)/python -m bench.gpu_check

# ruff, and import-linter's contracts ([tool.importlinter] in pyproject.toml): distlab never
# imports autograder
lint: setup
	$(BIN)/ruff check src autograder tests bench solutions
	$(BIN)/lint-imports

clean:
	rm -rf grading build .pytest_cache
