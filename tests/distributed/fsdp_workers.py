"""One rank of tests/distributed/test_fsdp2_emulated.py: ``python fsdp_workers.py SCENARIO [ARGS]`` with
FL_DEVICE=emu:CHIP and RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT set (as conftest.launch
sets them). Prints one RESULT= JSON line, as workers.py does.

The model is the shape of PyTorch's own FSDP2 test transformer (``common_dtensor.Transformer``: token and
position embeddings, pre-norm blocks of causal scaled_dot_product_attention and a GELU MLP, a final norm
and head), written out here because importing that module disables torch.backends' global flags and
sets TORCHINDUCTOR_CACHE_DIR in the process that imports it (the test process computes the reference).
"""

from __future__ import annotations

import os
import sys
from functools import partial

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.fsdp import fully_shard
from torch.distributed.tensor import DTensor
from workers import next_token_batches, next_token_loss, run

import torch_fl  # noqa: F401  (installs torch.fl)

VOCAB, CONTEXT, GLOBAL_BATCH, WIDTH, HEADS, LAYERS = 32, 8, 8, 16, 2, 2
# (reshard_after_forward, where the model is built): built on the host, fully_shard moves each shard to
# the mesh's device; built on the chip, fully_shard shards what is already there
FSDP_CASES = {"fsdp_reshard": (True, "host"), "fsdp_keep": (False, "chip")}


class Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.attention_norm, self.ffn_norm = nn.LayerNorm(WIDTH), nn.LayerNorm(WIDTH)
        self.qkv = nn.Linear(WIDTH, 3 * WIDTH, bias=False)
        self.wo = nn.Linear(WIDTH, WIDTH, bias=False)
        self.w1, self.w2 = nn.Linear(WIDTH, 4 * WIDTH), nn.Linear(4 * WIDTH, WIDTH)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch, length, _ = x.shape
        qkv = self.qkv(self.attention_norm(x)).view(batch, length, 3, HEADS, WIDTH // HEADS)
        q, k, v = qkv.permute(2, 0, 3, 1, 4)
        attended = nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.wo(attended.transpose(1, 2).reshape(batch, length, WIDTH))
        return x + self.w2(nn.functional.gelu(self.w1(self.ffn_norm(x))))


class TinyLM(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.tokens, self.positions = nn.Embedding(VOCAB, WIDTH), nn.Embedding(CONTEXT, WIDTH)
        self.layers = nn.ModuleList(Block() for _ in range(LAYERS))
        self.norm, self.output = nn.LayerNorm(WIDTH), nn.Linear(WIDTH, VOCAB, bias=False)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        x = self.tokens(tokens) + self.positions(torch.arange(tokens.shape[1], device=tokens.device))
        for layer in self.layers:
            x = layer(x)
        return self.output(self.norm(x))


def model() -> nn.Module:
    torch.manual_seed(0)
    return TinyLM()


batches = partial(next_token_batches, batch=GLOBAL_BATCH, context=CONTEXT, vocab=VOCAB)
loss_of = partial(next_token_loss, vocab=VOCAB)


def optimizer(params: list[torch.Tensor]) -> torch.optim.Optimizer:
    # SGD's default foreach path: on FSDP2's DTensor parameters that is _foreach_* over their shards. (Not
    # Adam: its g/sqrt(v) turns the last-bit differences of a split batch into ~1e-6 absolute in 4 steps,
    # on the CPU alone, which no rtol=1e-5 comparison of small weights survives.)
    return torch.optim.SGD(params, lr=0.5, momentum=0.9)


def reference(steps: int) -> tuple[dict[str, torch.Tensor], list[float]]:
    """One process on the CPU, the whole batch per step: what every data-parallel run must end with."""
    net = model()
    opt = optimizer(list(net.parameters()))
    losses = []
    for tokens, targets in zip(*batches(steps), strict=True):
        opt.zero_grad()
        loss = loss_of(net, tokens, targets)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return {k: v.detach().clone() for k, v in net.state_dict().items()}, losses


def _train(net: nn.Module, block: nn.Module, steps: int, dev: torch.device, after_first_forward: dict) -> list[float]:
    """This rank's share of every global batch; returns the global mean loss per step. What `block`'s
    weight is between the first forward and its backward goes into `after_first_forward`."""
    rank, world = dist.get_rank(), dist.get_world_size()
    share = GLOBAL_BATCH // world
    opt = optimizer(list(net.parameters()))
    memory = torch.get_device_module(dev)
    losses = []
    for tokens, targets in zip(*batches(steps), strict=True):
        mine = slice(rank * share, (rank + 1) * share)
        opt.zero_grad()
        loss = loss_of(net, tokens[mine].to(dev), targets[mine].to(dev))
        if not after_first_forward:
            weight = block.wo.weight
            after_first_forward.update(weight_type=type(weight).__name__, weight_shape=list(weight.shape),
                                       allocated=memory.memory_allocated(dev))
        loss.backward()
        opt.step()
        mean = loss.detach().clone()
        dist.all_reduce(mean)
        losses.append(mean.item() / world)
    return losses


def _fsdp(steps: int, dev: torch.device, reshard: bool, built_on: str) -> tuple[dict, dict]:
    net = model() if built_on == "host" else model().to(dev)
    for block in net.layers:
        fully_shard(block, reshard_after_forward=reshard)
    fully_shard(net, reshard_after_forward=reshard)
    shards = [p for p in net.parameters() if isinstance(p, DTensor)]
    facts: dict = {"sharded": len(shards) == len(list(net.parameters())),
                   "shard_devices": sorted({str(p.to_local().device) for p in shards}),
                   "local_numel": sum(p.to_local().numel() for p in shards),
                   "numel": sum(p.numel() for p in shards), "mesh": shards[0].device_mesh.device_type}
    first: dict = {}
    facts["losses"] = _train(net, net.layers[0], steps, dev, first)
    facts["after_first_forward"] = first
    # full_tensor(): every rank all-gathers each parameter over the emulated chip's collectives
    state = {k: v.full_tensor().detach().cpu() for k, v in net.state_dict().items()}
    return state, facts


def _ddp(steps: int, dev: torch.device) -> tuple[dict, dict]:
    net = model().to(dev)
    losses = _train(nn.parallel.DistributedDataParallel(net), net.layers[0], steps, dev, {})
    return ({k: v.detach().cpu() for k, v in net.state_dict().items()},
            {"losses": losses, "param_devices": sorted({str(p.device) for p in net.parameters()})})


def train(steps: str, out: str) -> dict:
    """DDP, then FSDP2 with and without resharding after forward, each from the same initial weights."""
    torch.fl.distributed.init_process_group(preflight=False)
    dev = torch.fl.distributed.device()
    runs: dict = {}
    facts: dict = {"device": str(dev), "backend": dist.get_backend()}
    state, facts["ddp"] = _ddp(int(steps), dev)
    runs["ddp"] = state
    for name, (reshard, built_on) in FSDP_CASES.items():
        runs[name], facts[name] = _fsdp(int(steps), dev, reshard, built_on)
    if dist.get_rank() == 0:
        torch.save(runs, out)
    return facts


def collectives(rounds: str) -> dict:
    """The collectives DTensor and FSDP2 issue through c10d's functional ops, in a loop (each round's
    temporaries freed while gloo may still hold the previous round's work), every result checked."""
    from torch.distributed import _functional_collectives as fc

    torch.fl.distributed.init_process_group(preflight=False)
    dev, rank, group = torch.fl.distributed.device(), dist.get_rank(), dist.group.WORLD
    wrong: list[str] = []
    for i in range(int(rounds)):
        mine = torch.full((8,), float(10 * rank + i), device=dev)
        gathered = fc.all_gather_tensor(mine, 0, group).cpu()
        coalesced = [t.cpu() for t in fc.all_gather_into_tensor_coalesced([mine, mine[:2] * 2], group)]
        reduced = fc.reduce_scatter_tensor(mine, "sum", 0, group).cpu()
        both = [t.cpu() for t in fc.reduce_scatter_tensor_coalesced([mine, mine[:4] * 2], "sum", [0, 0], group)]
        exchanged = fc.all_to_all_single(mine, None, None, group).cpu()
        passed = mine.clone()
        if rank == 0:
            dist.send(mine, 1)
        else:
            dist.recv(passed, 0)
        total = 2.0 * i + 10  # rank 0's i plus rank 1's 10 + i
        checks = {"all_gather": gathered.tolist() == [float(i)] * 8 + [10.0 + i] * 8,
                  "all_gather coalesced": coalesced[1].tolist() == [2.0 * i] * 2 + [2.0 * (10 + i)] * 2,
                  "reduce_scatter": reduced.tolist() == [total] * 4,
                  "reduce_scatter coalesced": [t.tolist() for t in both] == [[total] * 4, [2 * total] * 2],
                  "all_to_all": exchanged.tolist() == [float(i)] * 4 + [10.0 + i] * 4,
                  "send/recv": passed.cpu().tolist() == [float(i)] * 8}
        wrong += [f"round {i}: {name}" for name, ok in checks.items() if not ok]
    return {"device": str(dev), "rounds": int(rounds), "wrong": wrong[:5]}


if __name__ == "__main__":
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    sys.exit(run(globals()))
