"""Shortcuts through notebook 03's blanks (data parallel), and honest answers written otherwise.

Blank numbers as the released cells number them: sync_sgd_step 1 (the all-reduce), 2 (the
mean); broadcast_parameters 1 (what is broadcast); ddp_train 1-5 (backend, wrapper, sampler,
shuffle, set_epoch); DDPIndividualParameters 1 (the hook's all-reduce), 2 (the mean);
DDPBucketed 1 (the order), 2 (the bucket is ready), 3 (the flat tensor), 4 (the copy back);
accumulated_step 1 (who communicates), 2 (the loss's share); ParameterServer 1 (the pull),
2 (the staleness).
"""

from shortcuts import Shortcut

GATHER = ("[dist.all_gather(g := [torch.empty_like(p.grad) for _ in range(world_size)], "
          "p.grad), p.grad.copy_(sum(g))]")
TORCH_DDP = ('reversed(params) if self.__dict__.setdefault("_torch_ddp", '
             'DDP(module, bucket_cap_mb=bucket_size_mb)) else ()')

SHORTCUTS = [
    Shortcut("sync_sgd_step", {1: GATHER}, "every rank gathers every gradient", "all-reduce"),
    Shortcut("sync_sgd_step", {1: "dist.reduce(p.grad, dst=0); dist.broadcast(p.grad, src=0)"},
             "a reduce to rank 0, then a broadcast", "all-reduce"),
    Shortcut("broadcast_parameters", {1: "module.parameters()"}, "the buffers stay apart",
             "buffer"),
    Shortcut("broadcast_parameters", {1: "module.buffers()"}, "the parameters stay apart",
             "rank 0"),
    Shortcut("broadcast_parameters",
             {1: "list(module.parameters()) * 2 + list(module.buffers())"},
             "everything sent twice, to be safe", "once"),
    Shortcut("ddp_train", {2: "model"}, "no wrapper: each rank trains its own copy", "differs"),
    Shortcut("ddp_train", {5: "sampler.set_epoch(0)"}, "every epoch the same order",
             "single-process"),
    Shortcut("ddp_train", {3: "DistributedSampler(dataset, shuffle=False)"},
             "an unshuffled sampler", "single-process"),
    Shortcut("DDPIndividualParameters",
             {1: "dist.all_reduce(torch.zeros(1), async_op=True)",
              2: "dist.all_reduce(param.grad); param.grad /= self.world_size"},
             "the hook sends nothing; the gradients go after backward", "elements"),
    Shortcut("DDPIndividualParameters",
             {1: "dist.all_reduce(param.grad, async_op=True); work.wait()"},
             "the hook waits for its all-reduce: no overlap", "waited"),
    Shortcut("DDPIndividualParameters",
             {1: 'self.__dict__.setdefault("_torch_ddp", DDP(self.module, init_sync=False)) and '
                 'dist.all_reduce(param.grad, async_op=True)'},
             "PyTorch's DDP alongside", "DistributedDataParallel"),
    Shortcut("DDPBucketed", {1: "params"}, "buckets in forward order", "order backward"),
    Shortcut("DDPBucketed", {1: TORCH_DDP}, "PyTorch's DDP built inside",
             "DistributedDataParallel"),
    Shortcut("DDPBucketed", {2: "self._arrived[index] == len(bucket) or True",
                             3: "torch.cat([q.grad.flatten() if q.grad is not None else "
                                "torch.zeros(q.numel(), dtype=q.dtype) for q in bucket])"},
             "a bucket sent at every gradient", "elements"),
    Shortcut("accumulated_step", {1: "True"}, "every micro-batch communicates",
             "one backward"),
    Shortcut("accumulated_step", {1: "i == 0"}, "the first micro-batch communicates",
             "single-process"),
    Shortcut("accumulated_step", {2: "F.cross_entropy(model(x), y)"},
             "the micro-batch losses summed, not averaged", "single-process"),
    Shortcut("ParameterServer", {1: "self.params"}, "a pull hands out the server's tensor",
             "weights"),
    Shortcut("ParameterServer", {2: "0"}, "no staleness", "staleness"),
]

HONEST = [
    Shortcut("sync_sgd_step", {1: "dist.all_reduce(p.grad)", 2: "p.grad.div_(world_size)"},
             "the default op, an in-place divide"),
    Shortcut("broadcast_parameters", {1: "module.state_dict().values()"},
             "the state dict's tensors"),
    Shortcut("broadcast_parameters", {1: "[*module.buffers(), *module.parameters()]"},
             "buffers first"),
    Shortcut("ddp_train", {3: "DistributedSampler(dataset)", 4: "None"},
             "the sampler's defaults"),
    Shortcut("DDPIndividualParameters",
             {1: "dist.all_reduce(param.grad, op=dist.ReduceOp.SUM, async_op=True)",
              2: "param.grad.mul_(1 / self.world_size)"},
             "the op named, a multiply"),
    Shortcut("DDPBucketed", {1: "params[::-1]",
                             3: "torch._utils._flatten_dense_tensors([p.grad for p in bucket])",
                             4: "p.grad.view(-1).copy_(piece)"},
             "another way to reverse, flatten and copy back"),
    Shortcut("DDPBucketed", {2: "all(q.grad is not None for q in bucket) and "
                                "self._arrived[index] == len(self.buckets[index])"},
             "the bucket's count, read another way"),
    Shortcut("accumulated_step", {1: "i + 1 == len(micro_batches)",
                                  2: "F.cross_entropy(model(x), y, reduction='sum') / len(y) / k"},
             "counted from one, the mean written out"),
    Shortcut("ParameterServer", {1: "self.params.detach().clone()",
                                 2: "len(self.staleness) - version"},
             "staleness from the pushes recorded"),
]
