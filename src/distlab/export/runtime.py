"""The torchrun side of an exported script: this module's code is copied into every script
`python -m distlab.export` writes, so the script runs with torch alone (plus whatever your own
code imports).

torchrun starts the script once per rank and tells each copy who it is in its environment:
RANK, WORLD_SIZE, LOCAL_RANK (the rank on this node: which GPU), MASTER_ADDR and MASTER_PORT
(the rendezvous). `torchrun_main` joins the process group from there, NCCL on cuda:LOCAL_RANK
when this node has a GPU for the rank, gloo otherwise (`--backend` forces one), runs each
exercise's check on that world size, and prints on rank 0 what passed and the timings.
"""

import argparse
import os
import sys
import time
from dataclasses import dataclass

import torch
import torch.distributed as dist

TORCHRUN_VARIABLES = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")


class WorldSizeRefused(Exception):
    """An exercise that cannot run on this many ranks (raised before any collective, on every
    rank alike): the script says why and goes on with the other exercises."""


@dataclass
class Exercise:
    name: str
    check: object  # check(ranks, *functions): raises AssertionError when a function is wrong
    functions: tuple  # the learner's functions the check calls
    joins_group_itself: bool = False  # the function calls dist.init_process_group itself


@dataclass
class Ranks:
    """This process's place in the torchrun job, and what the checks need to know."""

    rank: int
    world_size: int
    local_rank: int
    backend: str
    device: torch.device
    nbytes: int  # the message size of the timings
    repeats: int

    def say(self, text: str) -> None:
        """Print once, on rank 0."""
        if self.rank == 0:
            print(text, flush=True)

    def refuse_unless(self, fits: bool, why: str) -> None:
        if not fits:
            raise WorldSizeRefused(why)

    def bandwidth(self, label: str, call, nbytes: int, factor: float) -> float:
        """Time `call()` (a collective every rank makes, on `nbytes` bytes of data), print its
        algorithm and bus bandwidths (nccl-tests' definitions: algbw = bytes / time, busbw =
        algbw x the bytes a rank sends per byte of data), and return the seconds."""
        call()  # warm-up: connections and buffers are set up by the first call
        times = torch.empty(self.repeats, dtype=torch.float64)
        for i in range(self.repeats):
            self.synchronize()
            dist.barrier()
            start = time.perf_counter()
            call()
            self.synchronize()
            times[i] = time.perf_counter() - start
        # a collective is over when its slowest rank is done
        slowest = times.to(self.device)
        dist.all_reduce(slowest, op=dist.ReduceOp.MAX)
        seconds = float(slowest.median())
        algbw = nbytes / seconds
        self.say(f"  {label}: {nbytes / 2**20:.2f} MiB in {seconds * 1e3:.3f} ms, "
                 f"algbw {algbw / 1e9:.3f} GB/s, busbw {algbw * factor / 1e9:.3f} GB/s "
                 f"({self.world_size} ranks, {self.backend})")
        return seconds

    def synchronize(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)


def allreduce_factor(world_size: int) -> float:
    """Bytes a rank sends per byte of an all-reduce on a ring: 2(N-1)/N (notebook 02)."""
    return 2 * (world_size - 1) / world_size


def race(mine, x: torch.Tensor, pairs: int, synchronize=lambda: None) -> tuple:
    """The speed challenge's measurement, the same in the notebook (distlab.challenge) and in
    an exported script: `mine(t)` and `dist.all_reduce(t)` each sum `x` in place over the
    default group, `pairs` times each, alternating which goes first (a slow moment of the
    machine then falls on both alike). A call takes as long as its slowest rank.

    Returns (your median seconds, dist.all_reduce's median seconds, score): the score is the
    median over the pairs of (all_reduce's time / yours), which is your bus bandwidth over the
    library's (same bytes, same ranks): 1.0 is as fast as the library."""
    original = x.clone()
    contenders = (mine, dist.all_reduce)
    for call in contenders:  # warm-up: connections and buffers are set up by a first call
        x.copy_(original)
        call(x)
    times = torch.empty(pairs, 2, dtype=torch.float64)
    for i in range(pairs):
        for k in (0, 1) if i % 2 == 0 else (1, 0):
            x.copy_(original)
            synchronize()
            dist.barrier()
            start = time.perf_counter()
            contenders[k](x)
            synchronize()
            times[i, k] = time.perf_counter() - start
    slowest = times.to(x.device)
    dist.all_reduce(slowest, op=dist.ReduceOp.MAX)
    times = slowest.cpu()
    x.copy_(original)
    return (float(times[:, 0].median()), float(times[:, 1].median()),
            float((times[:, 1] / times[:, 0]).median()))


def torchrun_environment() -> tuple[int, int, int]:
    missing = [name for name in TORCHRUN_VARIABLES if name not in os.environ]
    if missing:
        sys.exit(f"{', '.join(missing)} not set: start this script with torchrun, e.g.\n"
                 f"  torchrun --standalone --nproc-per-node 4 {sys.argv[0]}")
    return (int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"]),
            int(os.environ["LOCAL_RANK"]))


def pick_backend(forced: str | None, local_rank: int) -> tuple[str, torch.device]:
    """NCCL on this rank's GPU when the node has one for it, else gloo on the CPU."""
    gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    backend = forced or ("nccl" if local_rank < gpus else "gloo")
    if backend == "nccl":
        if local_rank >= gpus:
            sys.exit(f"--backend nccl: local rank {local_rank} needs GPU {local_rank}, and this "
                     f"node has {gpus}; start at most {gpus} ranks per node, or use gloo")
        torch.cuda.set_device(local_rank)
        device = torch.device("cuda", local_rank)
        torch.set_default_device(device)  # tensors your code makes without a device go there
        return backend, device
    return backend, torch.device("cpu")


def join_group(ranks: Ranks) -> None:
    """The default process group, from torchrun's MASTER_ADDR and MASTER_PORT (env://). Its
    keys in the rendezvous store get a prefix of their own: an exercise that joined and left a
    group itself (hello_allreduce) left its keys there, and a second group under the same keys
    would try to connect to the first one's long-closed ports."""
    store, _, _ = next(dist.rendezvous("env://", ranks.rank, ranks.world_size))
    extra = {"device_id": ranks.device} if ranks.backend == "nccl" else {}
    dist.init_process_group(ranks.backend, store=dist.PrefixStore("distlab-export", store),
                            rank=ranks.rank, world_size=ranks.world_size, **extra)


def run_exercise(ranks: Ranks, exercise: Exercise) -> bool:
    """Run one check; False when the world size is refused. A failure raises: torchrun then
    stops every rank and reports which one failed."""
    ranks.say(f"{exercise.name} on {ranks.world_size} ranks ({ranks.backend}):")
    try:
        exercise.check(ranks, *exercise.functions)
    except WorldSizeRefused as refused:
        ranks.say(f"  - {exercise.name} skipped: {refused}")
        return False
    except Exception as error:
        # the rank's own line, before torchrun's report of the failed process
        print(f"[rank {ranks.rank}] ✗ {exercise.name}: {type(error).__name__}: {error}",
              file=sys.stderr, flush=True)
        raise
    ranks.say(f"  ✓ {exercise.name}")
    return True


def torchrun_main(exercises: list[Exercise], argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="Your exercises, on torchrun's ranks.")
    parser.add_argument("--backend", choices=("nccl", "gloo"),
                        help="default: nccl when this node has a GPU per rank, else gloo")
    parser.add_argument("--exercise", action="append", choices=[e.name for e in exercises],
                        help="run only this one (repeatable); default: all of them")
    parser.add_argument("--bytes", type=int, default=None,
                        help="message size of the timings (default: 64 MiB on nccl, 4 MiB on "
                             "gloo)")
    parser.add_argument("--repeats", type=int, default=10, help="timed calls per timing")
    args = parser.parse_args(argv)
    rank, world_size, local_rank = torchrun_environment()
    backend, device = pick_backend(args.backend, local_rank)
    nbytes = args.bytes or (64 if backend == "nccl" else 4) * 2**20
    ranks = Ranks(rank, world_size, local_rank, backend, device, nbytes, max(args.repeats, 1))
    chosen = [e for e in exercises if not args.exercise or e.name in args.exercise]
    passed, refused = [], []
    # a function that joins (and leaves) the group itself runs before the script joins one
    for exercise in sorted(chosen, key=lambda e: not e.joins_group_itself):
        if not exercise.joins_group_itself and not dist.is_initialized():
            join_group(ranks)
        (passed if run_exercise(ranks, exercise) else refused).append(exercise.name)
    if dist.is_initialized():
        dist.barrier()
        dist.destroy_process_group()
    ranks.say(f"{len(passed)} passed on {world_size} ranks"
              + (f"; skipped, as this world size does not fit them: {', '.join(refused)}"
                 if refused else ""))
    # Leave without the interpreter's teardown: once, after every check had passed, rank 0
    # aborted there ("terminate called without an active exception", 1 of ~14 loaded test
    # launches); likely a thread torch left running (rank 0 hosts the rendezvous store).
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)
