"""Shortcuts through notebook 03's blanks (data parallel), and honest answers written otherwise.

Blank numbers as the released cells number them: sync_sgd_step 1 (the averaging block);
broadcast_parameters 1 (what is broadcast); ddp_train 1-5 (backend, wrapper, sampler, shuffle,
set_epoch: API); DDPIndividualParameters 1 (the hook's statement), 2 (the finish's loop);
DDPBucketed 1 (the order), 2 (the hook's `if` block: readiness, flat tensor, launch), 3 (the
wait and the mean), 4 (the copy back); accumulated_step 1 (who communicates); ParameterServer 1
(what a pull hands out).
"""

from shortcuts import Shortcut

GATHER = ("[dist.all_gather(g := [torch.empty_like(p.grad) for _ in range(world_size)], "
          "p.grad), p.grad.copy_(sum(g) / world_size)]")
TORCH_DDP = ('reversed(params) if self.__dict__.setdefault("_torch_ddp", '
             'DDP(module, bucket_cap_mb=bucket_size_mb)) else ()')
LAUNCH = "self._in_flight.append((dist.all_reduce(flat, async_op=True), bucket, flat))"

SHORTCUTS = [
    Shortcut("sync_sgd_step", {1: GATHER}, "every rank gathers every gradient", "all-reduce"),
    Shortcut("sync_sgd_step",
             {1: "dist.reduce(p.grad, dst=0); dist.broadcast(p.grad, src=0); "
                 "p.grad /= world_size"},
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
             {1: "pass",
              2: "for p in [q for q in self.module.parameters() if q.requires_grad]: "
                 "dist.all_reduce(p.grad); p.grad /= self.world_size"},
             "everything all-reduced after backward", "overlap"),
    Shortcut("DDPIndividualParameters",
             {1: "work = dist.all_reduce(param.grad, async_op=True); work.wait(); "
                 "self._in_flight.append((work, param))"},
             "the hook waits for its all-reduce", "overlap"),
    Shortcut("DDPIndividualParameters",
             {1: "self._in_flight.append((dist.all_reduce(param.grad), param))",
              2: "for work, param in self._in_flight: param.grad /= self.world_size"},
             "a blocking all-reduce in the hook", "overlap"),
    Shortcut("DDPIndividualParameters",
             {2: "for work, param in self._in_flight: param.grad /= self.world_size"},
             "the handles never waited for", "wait"),
    Shortcut("DDPIndividualParameters",
             {1: 'self.__dict__.setdefault("_torch_ddp", DDP(self.module, init_sync=False)) and '
                 'self._in_flight.append((dist.all_reduce(param.grad, async_op=True), param))'},
             "PyTorch's DDP alongside", "DistributedDataParallel"),
    Shortcut("DDPBucketed",
             {2: "if True: self._in_flight.append((dist.all_reduce(param.grad, async_op=True), "
                 "[param], param.grad.view(-1)))"},
             "one message per parameter", "bucket"),
    Shortcut("DDPBucketed", {1: "params"}, "buckets in forward order", "order backward"),
    Shortcut("DDPBucketed",
             {2: "if self._arrived[index] == len(bucket): "
                 "self._in_flight.append((None, bucket, None))",
              3: "flat = torch.cat([q.grad.flatten() for q in bucket]); dist.all_reduce(flat); "
                 "flat /= self.world_size"},
             "every bucket all-reduced after backward", "overlap"),
    Shortcut("DDPBucketed", {3: "flat /= self.world_size"}, "the handles never waited for",
             "wait"),
    Shortcut("DDPBucketed", {1: TORCH_DDP}, "PyTorch's DDP built inside",
             "DistributedDataParallel"),
    Shortcut("DDPBucketed",
             {2: "if True: flat = torch.cat([q.grad.flatten() if q.grad is not None else "
                 "torch.zeros(q.numel(), dtype=q.dtype) for q in bucket]); " + LAUNCH},
             "a bucket sent at every gradient", "bucket"),
    Shortcut("accumulated_step", {1: "True"}, "every micro-batch communicates",
             "one backward"),
    Shortcut("accumulated_step", {1: "i == 0"}, "the first micro-batch communicates",
             "single-process"),
    Shortcut("ParameterServer", {1: "self.params"}, "a pull hands out the server's tensor",
             "weights"),
]

HONEST = [
    Shortcut("sync_sgd_step", {1: "dist.all_reduce(p.grad, op=dist.ReduceOp.AVG)"},
             "the average in the all-reduce"),
    Shortcut("sync_sgd_step", {1: "dist.all_reduce(p.grad); p.grad.div_(world_size)"},
             "the default op, an in-place divide"),
    Shortcut("broadcast_parameters", {1: "module.state_dict().values()"},
             "the state dict's tensors"),
    Shortcut("broadcast_parameters", {1: "[*module.buffers(), *module.parameters()]"},
             "buffers first"),
    Shortcut("ddp_train", {3: "DistributedSampler(dataset)", 4: "None"},
             "the sampler's defaults"),
    Shortcut("ddp_train",
             {3: "DistributedSampler(dataset, num_replicas=world_size, rank=rank, "
                 "drop_last=True)"},
             "the remainder dropped instead of padded"),
    Shortcut("DDPIndividualParameters",
             {1: "self._in_flight.append(dist.all_reduce(param.grad, op=dist.ReduceOp.AVG, "
                 "async_op=True))",
              2: "for work in self._in_flight: work.wait()"},
             "the average in the all-reduce, handles only"),
    Shortcut("DDPIndividualParameters",
             {1: "self._in_flight.append((dist.all_reduce(param.grad, op=dist.ReduceOp.SUM, "
                 "async_op=True), param))",
              2: "for work, param in self._in_flight: work.wait(); "
                 "param.grad.mul_(1 / self.world_size)"},
             "the op named, a multiply"),
    Shortcut("DDPBucketed",
             {1: "params[::-1]",
              2: "if self._arrived[index] == len(self.buckets[index]): "
                 "flat = torch._utils._flatten_dense_tensors([q.grad for q in bucket]); "
                 "self._in_flight.append((dist.all_reduce(flat, op=dist.ReduceOp.AVG, "
                 "async_op=True), bucket, flat))",
              3: "work.wait()",
              4: "p.grad.view(-1).copy_(piece)"},
             "another way to reverse, flatten, average and copy back"),
    Shortcut("DDPBucketed",
             {2: "if all(q.grad is not None for q in bucket) and "
                 "self._arrived[index] == len(self.buckets[index]): "
                 "flat = torch.cat([q.grad.reshape(-1) for q in bucket]); " + LAUNCH,
              4: "p.grad = piece.view_as(p.grad).clone()"},
             "the bucket's count, read another way; a new .grad"),
    Shortcut("accumulated_step", {1: "i + 1 == len(micro_batches)"}, "counted from one"),
    Shortcut("ParameterServer", {1: "self.params.detach().clone()"}, "a detached copy"),
]
