"""Does `distlab.run` run a function on N real gloo ranks, and fail clearly when the ranks do?

Run: .venv/bin/python -m pytest tests/test_launch.py -q   (about half a minute on 2 cores)
"""

import contextlib
import functools
import linecache
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
import warnings

import cloudpickle
import pytest
import torch
import torch.distributed as dist

import distlab
from distlab import BlankNotFilled, DeadlockError, RankError, _____, launch, shutdown

# These tests use CPU tensors, so they ask for gloo even where GPUs would make nccl the default;
# the nccl path has its own test at the end.
run = functools.partial(distlab.run, backend="gloo")

# Ship this module's rank functions by value, as a notebook cell's would be, so the ranks need
# not import this test module (and pytest with it).
cloudpickle.register_pickle_by_value(sys.modules[__name__])


@pytest.fixture(scope="module", autouse=True)
def _no_pool_left_behind():
    yield
    shutdown()


def _gone(pid: int) -> bool:
    """Has this process exited (a zombie, waiting for a reaper that is not ours, counts)?"""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] == "Z"
    except FileNotFoundError:
        return True


def _pids(rank, world_size):
    return os.getpid(), os.getppid()  # the rank and its zygote


def _rank_times_ten(rank, world_size, offset=0):
    return rank * 10 + offset


def _sum_of_ranks(rank, world_size):
    t = torch.tensor([float(rank + 1)])
    dist.all_reduce(t)
    return t.item()


def test_do_results_come_back_per_rank_in_rank_order():
    assert run(_rank_times_ten, world_size=4) == [0, 10, 20, 30]
    assert run(_rank_times_ten, 5, world_size=3) == [5, 15, 25]


def test_do_tensors_travel_as_arguments_and_results():
    def scale(rank, world_size, x):
        return x * (rank + 1)

    out = run(scale, torch.arange(3.0), world_size=2)
    assert torch.equal(out[1], torch.tensor([0.0, 2.0, 4.0]))


@pytest.mark.parametrize("world_size", range(1, 9))
def test_does_all_reduce_give_the_sum_on_1_to_8_ranks(world_size):
    expected = world_size * (world_size + 1) / 2
    assert run(_sum_of_ranks, world_size=world_size) == [expected] * world_size


def test_are_warm_calls_served_by_the_same_ranks():
    first = run(_pids, world_size=4)
    assert run(_pids, world_size=4) == first


def test_does_device_say_cpu_on_gloo():
    assert run(lambda rank, world_size: str(distlab.device()), world_size=2) == ["cpu", "cpu"]


def test_can_the_learner_init_and_destroy_the_group_themselves():
    def own_group(rank, world_size):
        assert not dist.is_initialized()  # the launcher's group is gone for this call
        dist.init_process_group(backend="gloo", rank=rank, world_size=world_size)
        t = torch.ones(1)
        dist.all_reduce(t)
        dist.barrier()
        dist.destroy_process_group()
        return t.item(), os.environ["MASTER_ADDR"]

    assert run(own_group, world_size=3, init_group=False) == [(3.0, "127.0.0.1")] * 3
    assert run(_sum_of_ranks, world_size=3) == [6.0] * 3  # and the next call has a group again


def test_is_a_group_the_learner_left_behind_destroyed():
    def leave_group(rank, world_size):
        dist.init_process_group(backend="gloo", rank=rank, world_size=world_size)

    run(leave_group, world_size=2, init_group=False)
    assert run(lambda rank, world_size: dist.is_initialized(), world_size=2,
               init_group=False) == [False, False]


def test_is_the_group_rebuilt_when_fn_destroys_it():
    run(lambda rank, world_size: dist.destroy_process_group(), world_size=2)
    assert run(_sum_of_ranks, world_size=2) == [3.0, 3.0]


def test_are_prints_prefixed_and_in_rank_order(capsys):
    def chatty(rank, world_size):
        time.sleep(0.05 * (world_size - rank))  # the last rank prints first
        print(f"hello from {rank}")
        print("bye")

    run(chatty, world_size=3)
    assert capsys.readouterr().out.splitlines() == [
        "[rank 0] hello from 0", "[rank 0] bye", "[rank 1] hello from 1", "[rank 1] bye",
        "[rank 2] hello from 2", "[rank 2] bye"]


def _index_on_rank_2(rank, world_size):
    chunks = [torch.zeros(1)] * 2
    t = torch.zeros(1)
    if rank == 2:
        t = chunks[rank + 5]
    dist.all_reduce(t)  # the other ranks wait here for rank 2, which never comes
    return t


def test_does_an_exception_on_one_rank_name_the_rank_and_the_line():
    with pytest.raises(RankError) as info:
        run(_index_on_rank_2, world_size=4, timeout=60)
    message = str(info.value)
    assert message.startswith("rank 2 raised IndexError: list index out of range\n")
    assert "in _index_on_rank_2, line" in message and "t = chunks[rank + 5]" in message
    assert "ranks 0, 1, 3 were waiting" in message
    assert info.value.rank == 2 and info.value.exc_type == "IndexError"
    assert __file__ in info.value.learner_traceback
    assert "site-packages" not in info.value.learner_traceback
    assert run(_sum_of_ranks, world_size=4) == [10.0] * 4  # the pool recovers


def test_does_no_stale_message_reach_the_next_call():
    def send_then_fail(rank, world_size, value):
        if rank == 0:
            dist.send(torch.tensor([value]), dst=1)
        elif value == 111.0:
            raise ValueError("rank 1 fails before it receives")
        else:
            t = torch.zeros(1)
            dist.recv(t, src=0)
            return t.item()

    with pytest.raises(RankError, match="rank 1 raised ValueError"):
        run(send_then_fail, 111.0, world_size=2)
    assert run(send_then_fail, 222.0, world_size=2) == [None, 222.0]


def test_is_a_rank_that_exits_reported():
    def exit_on_1(rank, world_size):
        if rank == 1:
            os._exit(3)
        return rank

    with pytest.raises(RankError, match="rank 1 died"):
        run(exit_on_1, world_size=2)


def test_is_an_unsendable_result_reported_as_that_ranks_error():
    with pytest.raises(RankError, match="rank 0 raised TypeError: what rank 0 returned cannot"):
        run(lambda rank, world_size: threading.Lock(), world_size=1)


def test_is_an_unsendable_argument_refused_before_launch():
    with pytest.raises(TypeError, match="cannot send"):
        run(_rank_times_ten, threading.Lock(), world_size=2)


def test_is_a_bad_world_size_refused():
    with pytest.raises(ValueError, match="world_size"):
        run(_rank_times_ten, world_size=0)


def _unfilled(rank, world_size):
    return _____


def test_does_an_unfilled_blank_stop_the_call_before_anything_launches():
    shutdown()
    with pytest.raises(BlankNotFilled, match="return _____"):
        run(_unfilled, world_size=2)
    assert launch._pool is None


def _calls_unfilled(rank, world_size):
    return [_unfilled(rank, world_size)]


def test_does_an_unfilled_blank_in_a_function_it_calls_stop_the_call_before_anything_launches():
    """A demo whose function reaches a learner's empty blank (through a call, or a function
    passed as an argument) is refused before any rank starts, naming that function, as one
    with a blank of its own is."""
    shutdown()
    with pytest.raises(BlankNotFilled, match="^_unfilled still has 1 blank line"):
        run(_calls_unfilled, world_size=2)
    with pytest.raises(BlankNotFilled, match="^_unfilled still has 1 blank line"):
        run(_apply, _unfilled, world_size=2)
    assert launch._pool is None


def _apply(rank, world_size, fn):
    return fn(rank, world_size)


def _both_receive_first(rank, world_size):
    t = torch.zeros(256)
    print("waiting for my neighbour")
    dist.recv(t, src=(rank + 1) % world_size)
    dist.send(t, dst=(rank + 1) % world_size)


def test_does_a_deadlock_raise_in_time_naming_ranks_and_recv_and_leave_no_process():
    pids = [pid for pid, _ in run(_pids, world_size=2)]
    with pytest.raises(DeadlockError) as info:
        run(_both_receive_first, world_size=2, timeout=2)
    message = str(info.value)
    assert "rank 0: waiting in recv(src=1), in _both_receive_first" in message
    assert "rank 1: waiting in recv(src=0)" in message and "dist.recv(t, src=" in message
    assert "every rank is receiving, so nobody is sending" in message
    assert isinstance(info.value, TimeoutError)
    assert all(_gone(pid) for pid in pids)
    assert run(_sum_of_ranks, world_size=2) == [3.0, 3.0]


def test_does_a_deadlock_show_which_ranks_finished_and_print_what_they_printed(capsys):
    def barrier_on_0(rank, world_size):
        print("before")
        if rank == 0:
            dist.barrier()

    with pytest.raises(DeadlockError) as info:
        run(barrier_on_0, world_size=2, timeout=1)
    assert "rank 0: waiting in barrier(), in barrier_on_0" in str(info.value)
    assert "rank 1: finished" in str(info.value)
    assert "same collective calls" in str(info.value)
    assert capsys.readouterr().out.splitlines() == ["[rank 0] before", "[rank 1] before"]


def test_does_stop_in_the_notebook_kill_the_ranks_and_reraise():
    pids = [pid for pid, _ in run(_pids, world_size=2)]
    main = threading.main_thread().ident
    threading.Timer(0.5, signal.pthread_kill, (main, signal.SIGINT)).start()
    with pytest.raises(KeyboardInterrupt):
        run(lambda rank, world_size: time.sleep(30), world_size=2, timeout=60)
    assert all(_gone(pid) for pid in pids)


def test_does_shutdown_leave_no_process():
    pids = run(_pids, world_size=3)
    shutdown()
    assert all(_gone(pid) for pair in pids for pid in pair)


def test_does_stderr_stay_empty_when_ranks_write_and_warn_there(capfd):
    def noisy(rank, world_size):
        warnings.warn("a warning from a rank", stacklevel=1)
        print("to stderr", file=sys.stderr)
        os.write(2, b"straight to fd 2\n")
        os.write(1, b"straight to fd 1\n")
        return rank

    shutdown()  # a cold pool too: gloo talks most while it starts
    assert run(noisy, world_size=2) == [0, 1]
    out, err = capfd.readouterr()
    assert err == "" and out == ""
    with open(launch.log_path()) as log:
        assert "straight to fd 2" in log.read()


def _ring_pass(rank, world_size):
    right, left = (rank + 1) % world_size, (rank - 1) % world_size
    out, got = torch.full((4,), float(rank)), torch.zeros(4)
    requests = [dist.isend(out, dst=right), dist.irecv(got, src=left)]
    for request in requests:
        request.wait()
    if rank == 0:
        dist.send(got, dst=1)
    elif rank == 1:
        dist.recv(got, src=0)
    return got[0].item()


def test_does_trace_print_every_point_to_point_op_per_rank(capsys):
    assert run(_ring_pass, world_size=3, trace=True) == [2.0, 2.0, 1.0]
    assert capsys.readouterr().out.splitlines() == [
        "rank 0 -> 1 | isend 16 B", "rank 0 <- 2 | irecv 16 B", "rank 0 -> 1 | send 16 B",
        "rank 1 -> 2 | isend 16 B", "rank 1 <- 0 | irecv 16 B", "rank 1 <- 0 | recv 16 B",
        "rank 2 -> 0 | isend 16 B", "rank 2 <- 1 | irecv 16 B"]


def test_is_trace_off_by_default_and_send_untouched(capsys):
    files = run(lambda rank, world_size: dist.send.__code__.co_filename, world_size=2)
    assert all("distlab" not in f for f in files)
    assert capsys.readouterr().out == ""


CELL = '''\
import torch
import torch.distributed as dist

def ring_step(rank, world_size, chunks):
    t = torch.tensor([float(rank)])
    dist.all_reduce(t)
    idx = rank * 2
    buf = chunks[idx]
    return t.item() + buf
'''


def test_does_a_function_from_a_notebook_like_main_run_and_name_its_line():
    # IPython compiles a cell under a made-up file name and keeps its source in linecache only.
    name = "/tmp/ipykernel_0/fake_cell.py"
    linecache.cache[name] = (len(CELL), None, CELL.splitlines(True), name)
    namespace = {"__name__": "__main__"}
    exec(compile(CELL, name, "exec"), namespace)
    ring_step = namespace["ring_step"]
    assert run(ring_step, [10, 20, 30, 40, 50], world_size=2) == [11.0, 31.0]
    with pytest.raises(RankError) as info:
        run(ring_step, [10, 20], world_size=2)
    assert str(info.value).startswith("rank 1 raised IndexError: list index out of range\n"
                                      "  in ring_step, line 8: buf = chunks[idx]")


def test_does_a_function_from_an_importable_module_run(tmp_path, monkeypatch):
    (tmp_path / "learner_helpers.py").write_text("def twice(rank, world_size):\n"
                                                 "    return 2 * rank\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    import learner_helpers

    assert run(learner_helpers.twice, world_size=2) == [0, 2]


def test_a_long_tmpdir_still_runs_ranks(tmp_path):
    """Does run() work where TMPDIR is longer than a Unix socket's path may be? (Its socket
    goes to a short folder; make test's lanes put tmp_path past that length.)"""
    folder = tmp_path / ("deep" * 20)
    folder.mkdir()
    script = "from distlab import run\nprint(run(lambda rank, world_size: rank, world_size=2))"
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=120, env={**os.environ, "TMPDIR": str(folder)})
    assert (done.stdout, done.stderr) == ("[0, 1]\n", "")


def test_do_ranks_die_when_the_notebook_process_dies(tmp_path):
    script = textwrap.dedent("""
        import os, signal
        from distlab import run
        pids = run(lambda rank, world_size: (os.getpid(), os.getppid()), world_size=2)
        print(*sorted({pid for pair in pids for pid in pair}), flush=True)
        os.kill(os.getpid(), signal.SIGKILL)
    """)
    env = {**os.environ, "TMPDIR": str(tmp_path)}  # its log folder: no atexit will remove it
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=120, env=env)
    pids = [int(p) for p in done.stdout.split()]
    assert len(pids) == 3 and done.stderr == ""
    deadline = time.monotonic() + 10
    while not all(_gone(pid) for pid in pids) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert all(_gone(pid) for pid in pids)


def test_does_a_real_notebook_run_a_cell_function_twice_without_stderr():
    import nbformat
    from nbclient import NotebookClient

    cells = [
        "import torch, torch.distributed as dist\nfrom distlab import device, run",
        "def hello(rank, world_size):\n"
        "    t = torch.tensor([rank + 1.0], device=device())\n"
        "    dist.all_reduce(t)\n"
        "    print('sum', t.item())\n"
        "    return rank * 10",
        "print(run(hello))",
        "print(run(hello, world_size=2))",
    ]
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in cells])
    NotebookClient(nb, timeout=120, kernel_name="python3").execute()
    outputs = [o for cell in nb.cells for o in cell.outputs]
    assert all(o.get("name") != "stderr" for o in outputs), outputs
    text = "".join(o.get("text", "") for o in outputs)
    assert "[rank 3] sum 10.0\n[0, 10, 20, 30]" in text
    assert "[rank 1] sum 3.0\n[0, 10]" in text


@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs 2 GPUs for the nccl path")
def test_does_the_nccl_path_put_each_rank_on_its_gpu():
    def on_gpu(rank, world_size):
        t = torch.ones(1, device=distlab.device())
        dist.all_reduce(t)
        return str(distlab.device()), t

    out = run(on_gpu, world_size=2)
    assert [d for d, _ in out] == ["cuda:0", "cuda:1"]
    assert all(t.device.type == "cpu" and t.item() == 2.0 for _, t in out)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no GPU here: the nccl path runs "
                    "only where torch sees one")
def test_does_one_gpu_give_one_rank_the_mixed_backend():
    """With a GPU per rank (here 1 of 1), does run pick "cpu:gloo,cuda:nccl": the rank on
    cuda:0, a CUDA tensor reduced through NCCL, a CPU tensor through gloo?"""
    def both(rank, world_size):
        on_gpu, on_cpu = torch.ones(1, device=distlab.device()), torch.ones(1)
        dist.all_reduce(on_gpu)
        dist.all_reduce(on_cpu)
        return str(distlab.device()), dist.get_backend(), on_gpu, on_cpu

    [(where, backend, on_gpu, on_cpu)] = run(both, world_size=1)
    assert where == "cuda:0" and "nccl" in backend  # the CPU tensor's sum needed gloo
    assert on_gpu.device.type == "cpu" and on_gpu.item() == 1.0 and on_cpu.item() == 1.0


def test_a_long_run_in_a_notebook_shows_a_live_line_naming_who_is_still_running():
    """In a notebook kernel, does a run that lasts over a second show a line saying the ranks
    are running and which have returned, updated while they run, then how long they ran?"""
    import nbformat
    from nbclient import NotebookClient

    code = ("from distlab import run\nimport time\n"
            "def slow(rank, world_size):\n    time.sleep(3 if rank else 0)\n    return rank\n"
            "run(slow, world_size=2)")
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(code)])
    client = NotebookClient(nb, kernel_name="python3", timeout=120)
    seen, process = [], client.process_message

    def spy(msg, cell, cell_index):  # every display and its updates, as they arrive
        seen.append(msg["content"].get("data", {}).get("text/plain", ""))
        return process(msg, cell, cell_index)

    client.process_message = spy
    client.execute()
    assert any("still running: rank 1" in text and "returned: rank 0" in text
               for text in seen), seen

    final = [o for o in nb.cells[0].outputs if o["output_type"] == "display_data"]
    assert final[0]["data"]["text/plain"].startswith("2 rank(s) ran for")


def test_ranks_that_are_slow_to_start_show_the_live_line_too(monkeypatch):
    """Starting the ranks (torch imported in a cold launcher) is not silent either: past a
    second, the line says the ranks are starting, then that they run."""
    from IPython import display as ipython_display

    from distlab.launch import _LiveLine

    shown = []

    class Handle:
        def update(self, data, raw):
            shown.append(data["text/plain"])

    monkeypatch.setattr(ipython_display, "display",
                        lambda data, raw, display_id: shown.append(data["text/plain"]) or Handle())
    line = _LiveLine(4)
    line.enabled = True
    line.update(None, 0.5)
    assert shown == []  # a quick start says nothing
    line.update(None, 1.5)
    line.update([], 0.2)
    line.close()
    assert shown == ["⏳ starting 4 rank(s): 2 s", "⏳ 4 rank(s) running for 0 s",
                     "4 rank(s) ran for 0 s"]


def harness_with_its_own_group(rank, world_size):
    """short_group's sum where the launcher made no group; else only the file's name."""
    from autograder.exercises.checks import rendezvous_file, short_group

    total = torch.ones(1)
    with contextlib.nullcontext() if dist.is_initialized() else short_group(rank, world_size):
        dist.all_reduce(total)
    return rendezvous_file("check"), total.item()


def test_does_every_call_get_a_rendezvous_file_that_no_group_used_before():
    """Does each call's harness group (short_group) meet through a file of its own in the
    launcher's folder, the same on every rank? Named after the zygote's pid and MASTER_PORT,
    a name came back to a file that killed ranks had left, and a rank dialled an old address
    of its peer ("Gloo connectFullMesh failed ... Connection refused")."""
    calls = [launch.run(harness_with_its_own_group, world_size=2, init_group=init_group)
             for init_group in (False, False, True, True)]  # the last two: warm ranks, one group
    assert [total for call in calls for _, total in call] == [2.0] * 8
    assert all(call[0][0] == call[1][0] for call in calls)
    assert len({call[0][0] for call in calls}) == 4
    assert all(call[0][0].startswith(os.path.join(launch.log_dir(), "")) for call in calls)
