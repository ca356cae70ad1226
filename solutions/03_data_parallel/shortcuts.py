"""Shortcuts through notebook 03's blanks (data parallel), and honest answers written otherwise.

Blank numbers as the released cells number them: sync_sgd_step 1 (the count's all-reduce and
the loss this rank backpropagates, shards of unequal sizes);
broadcast_parameters 1 (the whole loop: which tensors, which collective); ddp_train 1-5
(backend, wrapper, sampler, shuffle, set_epoch: API); DDPIndividualParameters 1 (a debug
blank: FirstAttempt's blocking all-reduce in the hook, fixed: start it and leave its wait for
the given finish, which calls what the hooks appended to self._later; the loss arrives
scaled, so a plain sum); DDPBucketed 1 (fill_buckets' whole body: order
and close), 2 (the hook's body:
completeness, one tensor, asynchronous, and what the finish must do: wait, copy back);
predicted_all_reduces 1 (the prediction);
accumulated_step 1 (the micro-batch's context and its share of the samples: micro-batches of
unequal sizes); ParameterServer 1 (the fixed pull).
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
LAUNCH = "work = dist.all_reduce(flat, async_op=True)"
COPY = ("[q.grad.copy_(piece.view_as(q.grad)) "
        "for q, piece in zip(bucket, flat.split([r.numel() for r in bucket]))]")
HOOK = COUNT + ": " + FLAT + "; {launch}; self._later.append(lambda: {then})"
START = "work = dist.all_reduce(param.grad, async_op=True)"
LAST = "with model.no_sync() if y is not micro_batches[-1][1] else torch.enable_grad(): "
SHARE = 'F.cross_entropy(model(x), y, reduction="sum") / sum(len(t) for _, t in micro_batches)'

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
    Shortcut("DDPIndividualParameters", {1: "dist.all_reduce(param.grad)"},
             "FirstAttempt's blocking all-reduce, left as it was", "overlap"),
    Shortcut("DDPIndividualParameters", {1: f"{START}; work.wait()"},
             "started asynchronously, then waited for in the hook", "overlap"),
    Shortcut("DDPIndividualParameters", {1: START},
             "the handles dropped, never waited for", "wait"),
    Shortcut("DDPIndividualParameters",
             {1: "self._later.append(lambda: dist.all_reduce(param.grad))"},
             "the whole all-reduce left for the finish", "overlap"),
    Shortcut("DDPIndividualParameters",
             {1: "self._later.append(dist.all_reduce(param.grad, op=dist.ReduceOp.AVG, "
                 "async_op=True).wait)"},
             "averaged again, though the loss arrives scaled", "share"),
    Shortcut("DDPIndividualParameters",
             {1: 'self.__dict__.setdefault("_torch_ddp", DDP(self.module, init_sync=False)); '
                 f"{START}; self._later.append(work.wait)"},
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
                 "torch.zeros(q.numel(), dtype=q.dtype) for q in bucket]); " + LAUNCH
                 + f"; self._later.append(lambda: [work.wait()] + {COPY})"},
             "a bucket launched before it is complete", "bucket"),
    Shortcut("DDPBucketed",
             {2: HOOK.format(launch="dist.all_reduce(flat)", then=COPY)},
             "each bucket all-reduced blocking in the hook", "overlap"),
    Shortcut("DDPBucketed", {2: HOOK.format(launch=LAUNCH, then="work.wait()")},
             "the copy-back missing", ".grad"),
    Shortcut("DDPBucketed", {2: HOOK.format(launch=LAUNCH, then=COPY)},
             "the handles never waited for", "wait"),
    Shortcut("DDPBucketed",
             {2: HOOK.format(launch="work = dist.all_reduce(flat, op=dist.ReduceOp.AVG, "
                                    "async_op=True)", then=f"[work.wait()] + {COPY}")},
             "averaged again, though the loss arrives scaled", "share"),
    Shortcut("DDPBucketed",
             {2: 'self.__dict__.setdefault("_torch_ddp", DDP(self.module, init_sync=False))\n'
                 + HOOK.format(launch=LAUNCH, then=f"[work.wait()] + {COPY}")},
             "PyTorch's DDP built inside", "DistributedDataParallel"),
    Shortcut("predicted_all_reduces",
             {1: "[p.numel() for p in __import__('distlab.data_parallel', fromlist=['mlp'])"
                 ".mlp((256, 1024, 1024, 1024, 10)).parameters()]"},
             "the sizes computed from the model, not predicted", "prediction"),
    Shortcut("predicted_all_reduces",
             {1: "[1024 * 256 + 1024 + 1024 * 1024, 1024 + 1024 * 1024 + 1024, 10240 + 10]"},
             "buckets filled in forward order", "3c's rules"),
    Shortcut("predicted_all_reduces",
             {1: "list(map(int, DDPBucketed.__name__ and [1059850, 1049600, 263168]))"},
             "the numbers reached through names defined elsewhere", "arithmetic"),
    Shortcut("accumulated_step",
             {1: f"with torch.enable_grad(): ({SHARE}).backward()"},
             "every micro-batch communicates", "one backward"),
    Shortcut("accumulated_step",
             {1: "with torch.enable_grad() if y is micro_batches[0][1] else model.no_sync(): "
                 f"({SHARE}).backward()"},
             "the first micro-batch communicates", "which backward"),
    Shortcut("accumulated_step",
             {1: LAST + "(F.cross_entropy(model(x), y) / len(micro_batches)).backward()"},
             "each micro-batch weighed 1/k, though their sizes differ", "weighs"),
    Shortcut("accumulated_step", {1: LAST + "F.cross_entropy(model(x), y).backward()"},
             "the micro-batches' losses summed, not averaged", "weighs"),
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
             {1: "work = dist.all_reduce(param.grad, async_op=True)\n"
                 "self._later.append(lambda: work.wait())"},
             "the wait in a lambda"),
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
             {1: "handle = dist.all_reduce(param.grad, op=dist.ReduceOp.SUM, async_op=True)\n"
                 "self._later.append(handle.wait)"},
             "the sum named"),
    Shortcut("DDPBucketed",
             {1: FILL.format(order="params[::-1]", close=">="),
              2: "if self._step.setdefault(index, set()).add(param) or "
                 "self._step[index] == set(bucket): "
                 "flat = torch._utils._flatten_dense_tensors([q.grad for q in bucket]); "
                 + LAUNCH + f"; self._later.append(lambda: (work.wait(), {COPY}))"},
             "a loop with running size; the arrivals as a set"),
    Shortcut("DDPBucketed",
             {2: "self._step[index] = self._step.get(index, 0) + 1\n"
                 "if self._step[index] == len(bucket):\n"
                 "    flat = torch.cat([q.grad.reshape(-1) for q in bucket])\n"
                 "    work = dist.all_reduce(flat, async_op=True)\n"
                 "    def land(work=work, flat=flat, bucket=bucket):\n"
                 "        work.wait()\n"
                 "        for q, new in zip(bucket, torch._utils._unflatten_dense_tensors("
                 "flat, [q.grad for q in bucket])):\n"
                 "            q.grad.copy_(new)\n"
                 "    self._later.append(land)"},
             "a count per bucket, a nested function that waits and unflattens back"),
    Shortcut("predicted_all_reduces", {1: "[1059850, 1049600, 263168]"}, "the numbers"),
    Shortcut("accumulated_step",
             {1: "import contextlib\n"
                 "share = len(y) / sum(len(t) for _, t in micro_batches)\n"
                 "last = y is micro_batches[-1][1]\n"
                 "with contextlib.nullcontext() if last else model.no_sync():\n"
                 "    (F.cross_entropy(model(x), y) * share).backward()"},
             "the share and the last micro-batch named first"),
    Shortcut("accumulated_step",
             {1: "if y is micro_batches[-1][1]:\n"
                 f"    ({SHARE}).backward()\n"
                 "else:\n"
                 "    with model.no_sync():\n"
                 f"        ({SHARE}).backward()"},
             "an if and an else"),
    Shortcut("ParameterServer", {1: "self.params.detach().clone(), self.version"},
             "a detached copy"),
]

# The wrong blank tests/system/test_grading.py grades: (function, blank number, wrong answer
# made from the right one); that blank must cost its point and be named in the feedback.
WRONG = ("sync_sgd_step", 1,
         lambda answer: answer.replace("(len(y) / total)", "(1 / total)"))
