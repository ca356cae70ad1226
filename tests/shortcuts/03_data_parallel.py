"""Shortcuts through notebook 03's blanks (data parallel), and honest answers written otherwise.

Blank numbers as the released cells number them: sync_sgd_step 1 (the count's all-reduce and
the loss this rank backpropagates, shards of unequal sizes);
broadcast_parameters 1 (the whole loop: which tensors, which collective); ddp_train 1-5
(backend, wrapper, sampler, shuffle, set_epoch: API); DDPIndividualParameters 1 (the hook's
statement), 2 (the finish); DDPBucketed 1 (fill_buckets' whole body: order and close), 2 (the
hook's launch: completeness, one tensor, asynchronous), 3 (the finish: wait, copy back);
predicted_all_reduces 1 (the prediction);
accumulated_step 1 (the micro-batch's context and loss); ParameterServer 1 (the fixed pull).
"""

from shortcuts import Shortcut

MEAN = "F.cross_entropy(model(x), y)"
FILL = """buckets, bucket, size = [], [], 0
for p in {order}:
    bucket.append(p)
    size += p.numel() * p.element_size()
    if size {close} cap_bytes:
        buckets.append(bucket)
        bucket, size = [], 0
return buckets + ([bucket] if bucket else [])"""
COUNT = "if self._step.setdefault(index, []).append(param) or len(self._step[index]) == len(bucket)"
FLAT = "flat = torch.cat([q.grad.flatten() for q in bucket])"
LAUNCH = "self._step[index] = (dist.all_reduce(flat, op=dist.ReduceOp.AVG, async_op=True), flat)"
FINISH = """for index, bucket in enumerate(self.buckets):
    work, flat = self._step[index]
    {wait}
    for q, piece in zip(bucket, flat.split([r.numel() for r in bucket])):
        {copy}"""
LOSS = "(F.cross_entropy(model(x), y) / k).backward()"

SHORTCUTS = [
    Shortcut("sync_sgd_step", {1: f"loss = {MEAN} / dist.get_world_size()"},
             "the plain mean over the ranks, as if the shards were equal", "shard"),
    Shortcut("sync_sgd_step", {1: f"loss = {MEAN}"}, "each rank's mean loss as it is", "shard"),
    Shortcut("sync_sgd_step",
             {1: "sizes = [torch.zeros(1) for _ in range(dist.get_world_size())]; "
                 "dist.all_gather(sizes, torch.tensor([float(len(y))])); "
                 f"loss = {MEAN} * (len(y) / sum(sizes))"},
             "every shard's size gathered", "all-reduce"),
    Shortcut("sync_sgd_step",
             {1: f"loss = {MEAN} * len(y) / sum(dist.all_reduce(t := torch.tensor(float(len(y)))) "
                 "or t for _ in model.parameters())"},
             "the count all-reduced once per parameter", "one number"),
    Shortcut("broadcast_parameters",
             {1: "for tensor in module.parameters(): dist.broadcast(tensor, src=0)"},
             "the buffers stay apart", "buffer"),
    Shortcut("broadcast_parameters",
             {1: "for tensor in module.buffers(): dist.broadcast(tensor, src=0)"},
             "the parameters stay apart", "rank 0"),
    Shortcut("broadcast_parameters",
             {1: "for tensor in list(module.parameters()) * 2 + list(module.buffers()): "
                 "dist.broadcast(tensor, src=0)"},
             "everything sent twice, to be safe", "once"),
    Shortcut("broadcast_parameters",
             {1: "for tensor in [*module.parameters(), *module.buffers()]: "
                 "dist.all_reduce(tensor, op=dist.ReduceOp.AVG)"},
             "the replicas averaged instead of made rank 0's", "rank 0"),
    Shortcut("ddp_train", {2: "model"}, "no wrapper: each rank trains its own copy", "differs"),
    Shortcut("ddp_train", {5: "sampler.set_epoch(0)"}, "every epoch the same order",
             "single-process"),
    Shortcut("ddp_train", {3: "DistributedSampler(dataset, shuffle=False)"},
             "an unshuffled sampler", "single-process"),
    Shortcut("DDPIndividualParameters",
             {1: "dist.all_reduce(param.grad, op=dist.ReduceOp.AVG); self._in_flight.append("
                 "__import__('types').SimpleNamespace(wait=lambda: None))"},
             "a blocking all-reduce in the hook", "overlap"),
    Shortcut("DDPIndividualParameters",
             {1: "work = dist.all_reduce(param.grad, op=dist.ReduceOp.AVG, async_op=True); "
                 "work.wait(); self._in_flight.append(work)"},
             "the hook waits for its all-reduce", "overlap"),
    Shortcut("DDPIndividualParameters",
             {1: "dist.all_reduce(param.grad, op=dist.ReduceOp.AVG, async_op=True)"},
             "the handles dropped, never waited for", "wait"),
    Shortcut("DDPIndividualParameters", {2: "self._in_flight.clear()"},
             "the finish drops the handles", "wait"),
    Shortcut("DDPIndividualParameters",
             {2: "self._in_flight and self._in_flight.pop().wait(); self._in_flight.clear()"},
             "the finish waits for the last handle only", "wait"),
    Shortcut("DDPIndividualParameters",
             {1: "self._in_flight.append(dist.all_reduce(param.grad, async_op=True))"},
             "the sum, not the mean", "single-process"),
    Shortcut("DDPIndividualParameters",
             {1: 'self.__dict__.setdefault("_torch_ddp", DDP(self.module, init_sync=False)) and '
                 'self._in_flight.append(dist.all_reduce(param.grad, op=dist.ReduceOp.AVG, '
                 'async_op=True))'},
             "PyTorch's DDP alongside", "DistributedDataParallel"),
    Shortcut("DDPBucketed", {1: "return [[p] for p in reversed(params)]"},
             "one bucket per parameter", "more all-reduces"),
    Shortcut("DDPBucketed", {1: FILL.format(order="params", close=">=")},
             "buckets filled in forward order", "order backward"),
    Shortcut("DDPBucketed", {1: "return [list(reversed(params))]"},
             "the whole model in one bucket", "larger than it needs"),
    Shortcut("DDPBucketed", {1: FILL.format(order="reversed(params)", close=">")},
             "a bucket that reaches the cap exactly stays open", "larger than it needs"),
    Shortcut("DDPBucketed",
             {1: FILL.format(order="reversed(params)", close=">=").replace(
                 "size += p.numel() * p.element_size()", "size += p.numel()")},
             "the cap counted in elements, not bytes", "bucket"),
    Shortcut("DDPBucketed",
             {2: "if True: flat = torch.cat([q.grad.flatten() if q.grad is not None else "
                 "torch.zeros(q.numel(), dtype=q.dtype) for q in bucket]); " + LAUNCH},
             "a bucket launched before it is complete", "bucket"),
    Shortcut("DDPBucketed",
             {2: f"{COUNT}: {FLAT}; dist.all_reduce(flat, op=dist.ReduceOp.AVG); "
                 "self._step[index] = (__import__('types').SimpleNamespace(wait=lambda: None), "
                 "flat)"},
             "each bucket all-reduced blocking in the hook", "overlap"),
    Shortcut("DDPBucketed",
             {3: FINISH.format(wait="work.wait()", copy="pass")},
             "the copy-back missing", ".grad"),
    Shortcut("DDPBucketed",
             {3: FINISH.format(wait="pass", copy="q.grad.copy_(piece.view_as(q.grad))")},
             "the handles never waited for", "wait"),
    Shortcut("DDPBucketed",
             {2: 'self.__dict__.setdefault("_torch_ddp", DDP(self.module, init_sync=False))\n'
                 f"{COUNT}: {FLAT}; {LAUNCH}"},
             "PyTorch's DDP built inside", "DistributedDataParallel"),
    Shortcut("predicted_all_reduces",
             {1: "[p.numel() for p in __import__('distlab.data_parallel', fromlist=['mlp'])"
                 ".mlp((256, 1024, 1024, 1024, 10)).parameters()]"},
             "the sizes computed from the model, not predicted", "prediction"),
    Shortcut("predicted_all_reduces",
             {1: "[1024 * 256 + 1024 + 1024 * 1024, 1024 + 1024 * 1024 + 1024, 10240 + 10]"},
             "buckets filled in forward order", "backward's order"),
    Shortcut("accumulated_step",
             {1: "with contextlib.nullcontext(): " + LOSS},
             "every micro-batch communicates", "one backward"),
    Shortcut("accumulated_step",
             {1: "with contextlib.nullcontext() if i == 0 else model.no_sync(): " + LOSS},
             "the first micro-batch communicates", "single-process"),
    Shortcut("accumulated_step",
             {1: "with contextlib.nullcontext() if i == k - 1 else model.no_sync(): "
                 "F.cross_entropy(model(x), y).backward()"},
             "the micro-batches' losses summed, not averaged", "single-process"),
    Shortcut("ParameterServer", {1: "self.params, self.version"},
             "a pull hands out the server's tensor", "weights"),
]

HONEST = [
    Shortcut("sync_sgd_step",
             {1: "n = torch.tensor([len(y)]); dist.all_reduce(n); "
                 "loss = F.cross_entropy(model(x), y, reduction='sum') / n.item()"},
             "the summed loss over the all-reduced count"),
    Shortcut("sync_sgd_step",
             {1: "total = torch.tensor(float(len(y))); dist.all_reduce(total); "
                 "loss = F.cross_entropy(model(x), y).mul(len(y)).div(total)"},
             "the mean scaled by the shard's share"),
    Shortcut("DDPIndividualParameters",
             {2: "[work.wait() for work in self._in_flight]; self._in_flight.clear()"},
             "every handle waited for, then the list cleared"),
    Shortcut("broadcast_parameters",
             {1: "for tensor in module.state_dict().values(): dist.broadcast(tensor, src=0)"},
             "the state dict's tensors"),
    Shortcut("broadcast_parameters",
             {1: "for tensor in [*module.buffers(), *module.parameters()]: "
                 "dist.broadcast(tensor, 0)"},
             "buffers first"),
    Shortcut("ddp_train", {3: "DistributedSampler(dataset)", 4: "None"},
             "the sampler's defaults"),
    Shortcut("ddp_train",
             {3: "DistributedSampler(dataset, num_replicas=world_size, rank=rank, "
                 "drop_last=True)"},
             "the remainder dropped instead of padded"),
    Shortcut("DDPIndividualParameters",
             {1: "param.grad /= dist.get_world_size(); "
                 "self._in_flight.append(dist.all_reduce(param.grad, async_op=True))"},
             "divided first, then summed"),
    Shortcut("DDPBucketed",
             {1: FILL.format(order="params[::-1]", close=">="),
              2: "if self._step.setdefault(index, set()).add(param) or "
                 "self._step[index] == set(bucket): "
                 "flat = torch._utils._flatten_dense_tensors([q.grad for q in bucket]); "
                 + LAUNCH},
             "a loop with running size; the arrivals as a set"),
    Shortcut("DDPBucketed",
             {2: "self._step[index] = self._step.get(index, 0) + 1\n"
                 "if self._step[index] == len(bucket):\n"
                 "    flat = torch.cat([q.grad.reshape(-1) for q in bucket]) "
                 "/ dist.get_world_size()\n"
                 "    self._step.setdefault('sent', []).append("
                 "(dist.all_reduce(flat, async_op=True), bucket, flat))",
              3: "for work, bucket, flat in self._step['sent']:\n"
                 "    work.wait()\n"
                 "    for q, new in zip(bucket, torch._utils._unflatten_dense_tensors("
                 "flat, [q.grad for q in bucket])):\n"
                 "        q.grad.copy_(new)"},
             "a count per bucket, a list of handles, unflattened back; divided before the sum"),
    Shortcut("predicted_all_reduces", {1: "[1059850, 1049600, 263168]"}, "the numbers"),
    Shortcut("accumulated_step",
             {1: "with model.no_sync() if i + 1 < len(micro_batches) else "
                 "contextlib.nullcontext(): F.cross_entropy(model(x), y).div(k).backward()"},
             "counted from one, the other way round"),
    Shortcut("ParameterServer", {1: "self.params.detach().clone(), self.version"},
             "a detached copy"),
]
