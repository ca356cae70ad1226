"""Everything under tests/system/ is slow (real grading batches, Lab servers, a browser):
`make test` runs it, `make quick` (pytest -m "not slow") leaves it out."""

from pathlib import Path

import pytest

HERE = Path(__file__).parent


def pytest_collection_modifyitems(config, items):
    for item in items:
        if HERE in Path(item.fspath).parents:
            item.add_marker(pytest.mark.slow)
