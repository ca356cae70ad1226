"""`make gpu-check`: every path of the course a GPU machine takes, one line each, ok or why not.

    python -m bench.gpu_check                 # as many ranks as GPUs (at most 8), and 1
    python -m bench.gpu_check --skip-notebooks

The course is written and tested on CPU gloo; this is the one command that runs what only a
GPU machine runs:
- the launcher (`distlab.run`) with CUDA tensors: its default backend "cpu:gloo,cuda:nccl"
  when torch sees a GPU per rank, `distlab.device()` = cuda:<rank>, results back on the CPU;
- NCCL alone, and the mixed backend with a CPU tensor (gloo) and a CUDA tensor (nccl);
- each notebook's exported torchrun script (python -m distlab.export, from the solved source)
  on NCCL, `--nproc-per-node` 1 and the number of GPUs;
- each solved notebook top to bottom: its `run(...)` calls whose world size the GPUs cover go
  through the mixed backend; the larger ones stay on gloo, as on a laptop (the exercises make
  CPU tensors: in the notebooks the GPU is the launcher's, not the exercises').

Without a GPU (or with a CPU build of torch) it says so and exits 0: nothing to check.
Exit status 1 when a path failed.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
import traceback
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))
    sys.path.insert(1, str(ROOT / "src"))


def _on_cuda(rank, world_size):
    """A rank of the default (mixed) group: an all-reduce of a CUDA tensor on its device."""
    import torch
    import torch.distributed as dist

    import distlab

    x = torch.full((4,), float(rank + 1), device=distlab.device())
    dist.all_reduce(x)
    return str(x.device), x  # x comes back on the CPU


def _mixed(rank, world_size):
    """Both halves of "cpu:gloo,cuda:nccl": a CPU tensor and a CUDA tensor, all-reduced."""
    import torch
    import torch.distributed as dist

    on_cpu, on_gpu = torch.ones(3), torch.ones(3, device=f"cuda:{rank}")
    dist.all_reduce(on_cpu)
    dist.all_reduce(on_gpu)
    return float(on_cpu.sum()), float(on_gpu.sum().cpu())


def launcher(n: int) -> str:
    from distlab import run

    results = run(_on_cuda, world_size=n)
    devices = [device for device, _ in results]
    expected = float(n * (n + 1) / 2)
    assert devices == [f"cuda:{r}" for r in range(n)], f"ranks ran on {devices}"
    assert all(x.device.type == "cpu" and float(x[0]) == expected for _, x in results), results
    return f"ranks on {', '.join(devices)}, all-reduce of CUDA tensors = {expected:g}"


def backend(name: str, n: int) -> str:
    from distlab import run
    from distlab.launch import MIXED

    if name == "nccl":
        results = run(_on_cuda, world_size=n, backend="nccl")
        assert all(float(x[0]) == n * (n + 1) / 2 for _, x in results), results
        return "all-reduce of CUDA tensors"
    sums = run(_mixed, world_size=n, backend=MIXED)
    assert all(s == (3.0 * n, 3.0 * n) for s in sums), sums
    return "CPU tensor through gloo, CUDA tensor through nccl"


def exported(assignment: str, n: int, folder: Path) -> str:
    from distlab.export import ExportError, export
    from distlab.source.paths import source_path

    try:
        script = export(source_path(assignment), [], folder)
    except ExportError:
        return "SKIP: nothing in it exports to torchrun"
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONWARNINGS": "ignore"}
    done = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone",
                           "--nproc-per-node", str(n), str(script), "--backend", "nccl",
                           "--repeats", "3"], capture_output=True, text=True, timeout=600,
                          env=env)
    summary = next((line for line in done.stdout.splitlines() if " passed on " in line), "")
    assert done.returncode == 0, (summary or "") + (done.stderr.strip().splitlines() or [""])[-1]
    return summary


def notebook(assignment: str) -> str:
    from autograder import solved
    from bench import execute

    execute(solved.load(assignment))
    return "ran top to bottom"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--skip-notebooks", action="store_true")
    args = parser.parse_args(argv)
    import torch

    if not torch.cuda.is_available() or torch.cuda.device_count() == 0:
        build = f"torch {torch.__version__}" + (", a CPU build" if torch.version.cuda is None
                                                 else f", CUDA {torch.version.cuda}")
        print(f"gpu-check: skipped, no GPU here (torch.cuda.is_available() is False; {build}). "
              "Run it on a machine with an NVIDIA GPU and a CUDA build of torch, e.g. "
              "make setup TORCH_VERSION=2.13.0 TORCH_INDEX=https://download.pytorch.org/whl/"
              "cu128, then make gpu-check.")
        return 0
    from distlab.source.paths import assignment_ids

    gpus = min(torch.cuda.device_count(), 8)
    sizes = sorted({1, gpus})
    print(f"gpu-check: {torch.cuda.device_count()} GPU(s) ({torch.cuda.get_device_name(0)}), "
          f"torch {torch.__version__}, CUDA {torch.version.cuda}; world sizes {sizes}", flush=True)
    folder = Path(tempfile.mkdtemp(prefix="gpu-check-"))
    paths = [(f"launcher, CUDA tensors, world size {n}", launcher, (n,)) for n in sizes]
    paths += [(f"backend {name}, world size {n}", backend, (name, n))
              for name in ("nccl", "cpu:gloo,cuda:nccl") for n in sizes]
    paths += [(f"torchrun {a} on nccl, --nproc-per-node {n}", exported, (a, n, folder))
              for a in assignment_ids() for n in sizes]
    failed = 0

    def attempt(label, check, arguments) -> str:
        start = time.perf_counter()
        try:
            said = check(*arguments)
        except Exception as error:  # a path that fails says why, and the others still run
            last = traceback.format_exception_only(error)[-1].strip()
            return f"FAILED {label} ({time.perf_counter() - start:.1f} s): {last}"
        word = "skip  " if said.startswith("SKIP") else "ok    "
        return f"{word}{label} ({time.perf_counter() - start:.1f} s): {said.removeprefix('SKIP: ')}"

    for label, check, arguments in paths:
        line = attempt(label, check, arguments)
        failed += line.startswith("FAILED")
        print(line, flush=True)
    if not args.skip_notebooks:  # several at once: each is mostly its ranks waiting
        with ThreadPoolExecutor(max_workers=4) as pool:
            lines = pool.map(lambda a: attempt(f"notebook {a} (solved)", notebook, (a,)),
                             assignment_ids())
            for line in lines:
                failed += line.startswith("FAILED")
                print(line, flush=True)
    print(f"gpu-check: {'all paths ok' if not failed else f'{failed} path(s) failed'}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
