"""Run every benchmark: `python -m bench` (or `make bench`)."""

import importlib

for name in ("bench.bench_launch", "bench.bench_collectives", "bench.bench_cost_models",
             "bench.bench_tensor_parallel", "bench.bench_pipeline_parallel",
             "bench.bench_data_parallel", "bench.bench_zero", "bench.bench_hybrid",
             "bench.bench_notebooks", "bench.bench_grading",
             "bench.bench_exchange", "bench.bench_validate", "bench.bench_drills"):
    try:
        module = importlib.import_module(name)
    except ModuleNotFoundError as err:
        print(f"\n## {name}: not available ({err})")
        continue
    module.main()
