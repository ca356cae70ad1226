"""`make gpu-check` on a machine without a GPU: it says why it checked nothing and exits 0
(CI and a laptop run it as they are). Its GPU paths run on a GPU machine only: the README's
"GPU check" says where it last ran."""

import subprocess
import sys

import pytest
import torch

from distlab.source import paths


@pytest.mark.skipif(torch.cuda.is_available(), reason="a GPU is here: make gpu-check runs it")
def test_does_gpu_check_skip_cleanly_and_say_why_without_a_gpu():
    done = subprocess.run([sys.executable, "-m", "bench.gpu_check"], cwd=paths.ROOT,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("gpu-check: skipped, no GPU here"), done.stdout
    assert "make gpu-check" in done.stdout and done.stderr == ""
