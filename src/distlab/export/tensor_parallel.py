"""04_tensor_parallel on torchrun: the column- and row-parallel linear layers against
nn.Linear, as the notebook checks them. These checks are copied into the script (torch, dist
and the runtime's names only)."""

import torch

from distlab.export.spec import Exportable

IN_FEATURES, OUT_FEATURES = 64, 32


def check_column_parallel_forward(ranks, column_parallel_forward):
    """nn.Linear(64, 32), each rank given its rows of the weight and bias, a 2-D and a 3-D
    input: every rank returns nn.Linear's whole output."""
    rank, n, device = ranks.rank, ranks.world_size, ranks.device
    ranks.refuse_unless(32 % n == 0, f"column_parallel_forward splits nn.Linear(64, 32)'s 32 "
                        f"output features evenly: use a world size that divides 32, not {n}")
    torch.manual_seed(0)
    linear = torch.nn.Linear(64, 32).to(device, torch.float64)
    weight, bias = linear.weight.detach(), linear.bias.detach()
    for shape in ((4, 64), (2, 3, 64)):
        x = torch.randn(*shape, dtype=torch.float64, device=device)
        torch.distributed.broadcast(x, src=0)  # the same input on every rank
        y = column_parallel_forward(rank, n, x, weight.chunk(n, dim=0)[rank],
                                    bias.chunk(n, dim=0)[rank])
        assert y.shape == linear(x).shape, (f"input {tuple(shape)}: rank {rank} returned "
                                            f"{tuple(y.shape)}, not the whole output")
        assert torch.allclose(y, linear(x), atol=1e-10), (
            f"input {tuple(shape)}: rank {rank}'s output differs from nn.Linear's")


def check_row_parallel_forward(ranks, row_parallel_forward):
    """nn.Linear(64, 32), each rank given its features of the input and columns of the weight,
    and the whole bias: every rank returns nn.Linear's output."""
    rank, n, device = ranks.rank, ranks.world_size, ranks.device
    ranks.refuse_unless(64 % n == 0, f"row_parallel_forward splits nn.Linear(64, 32)'s 64 "
                        f"input features evenly: use a world size that divides 64, not {n}")
    torch.manual_seed(0)
    linear = torch.nn.Linear(64, 32).to(device, torch.float64)
    weight, bias = linear.weight.detach(), linear.bias.detach()
    for shape in ((4, 64), (2, 3, 64)):
        x = torch.randn(*shape, dtype=torch.float64, device=device)
        torch.distributed.broadcast(x, src=0)
        y = row_parallel_forward(rank, n, x.chunk(n, dim=-1)[rank],
                                 weight.chunk(n, dim=1)[rank], bias)
        assert torch.allclose(y, linear(x), atol=1e-10), (
            f"input {tuple(shape)}: rank {rank}'s output differs from nn.Linear's")


EXERCISES = (
    Exportable("column_parallel_forward", check_column_parallel_forward,
               ("column_parallel_forward",)),
    Exportable("row_parallel_forward", check_row_parallel_forward, ("row_parallel_forward",)),
)
