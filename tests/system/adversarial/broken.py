"""Submissions that are not (valid) Python or not a notebook at all."""

from __future__ import annotations

import json

from adversarial import ALL, NOTHING, RELEASED, kind
from adversarial.cells import replace_in


@kind(base=RELEASED, solve=["ring_allreduce", "chunk_bounds"], zero=["ring_allreduce_tests"],
      earns=["chunk_bounds_tests"])
def syntax_error(nb):
    """ring_allreduce and chunk_bounds solved, with a syntax error in ring_allreduce's cell.
    That cell and the checks that use it fail; ring_allreduce scores 0, chunk_bounds its
    points."""
    header = 'def ring_allreduce(gpu_grads, op="mean", trace=False):'
    return replace_in(nb, "ring_allreduce", header, header.replace("):", ":"))


@kind(base=NOTHING, zero=ALL)
def invalid_json(*_):
    """A notebook file cut off in the middle (not valid JSON). nbgrader cannot read it: the
    run records 0, writes the not-graded page, and goes on with the others."""
    return b'{"cells": [{"cell_type": "code", "execution_count": null, "metadata": {}, "sou'


@kind(base=NOTHING, zero=ALL)
def not_a_notebook(*_):
    """Valid JSON that is no notebook (cells is a string, nbformat 99). As invalid_json: 0."""
    return json.dumps({"nbformat": 99, "nbformat_minor": 0, "metadata": {},
                       "cells": "import os; os.system('touch /tmp/marker')"}).encode()
