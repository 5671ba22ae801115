"""A torchrun script for jobs whose ranks run on different emulated chips (FL_RANK_DEVICES).

    FL_RANK_DEVICES=emu:npu,emu:cuda,emu:mlu torchrun --nproc-per-node 3 mixed_workers.py SCENARIO OUT [ARGS]

Every scenario (ddp, uneven, fsdp) trains `tiny_transformer` on its share of one global batch per step and writes this
rank's final weights and facts to OUT/rank<N>.pt; the test compares them with `reference_weights`, the
same training as one process on the whole batch.
"""

from __future__ import annotations

import os
import sys
from functools import partial
from pathlib import Path

import torch
from torch import nn
from workers import next_token_batches, next_token_loss  # tests/distributed/workers.py

import torch_fl  # noqa: F401

VOCAB, WIDTH, CONTEXT, GLOBAL_BATCH = 32, 16, 6, 12


def tiny_transformer() -> nn.Module:
    torch.manual_seed(0)
    layer = nn.TransformerEncoderLayer(WIDTH, nhead=2, dim_feedforward=32, dropout=0.0, batch_first=True)
    return nn.Sequential(nn.Embedding(VOCAB, WIDTH), layer, nn.Linear(WIDTH, VOCAB))


batches = partial(next_token_batches, batch=GLOBAL_BATCH, context=CONTEXT, vocab=VOCAB)
loss_of = partial(next_token_loss, vocab=VOCAB)


def reference_weights(steps: int, lr: float = 0.1) -> dict[str, torch.Tensor]:
    """One process, the whole batch per step: what every data-parallel run must end with."""
    model = tiny_transformer()
    opt = torch.optim.SGD(model.parameters(), lr=lr)
    xs, ys = batches(steps)
    for x, y in zip(xs, ys, strict=True):
        opt.zero_grad()
        loss_of(model, x, y).backward()
        opt.step()
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def _train(model: nn.Module, params: list[torch.Tensor], steps: int, shares: list[int], rank: int,
           dev: torch.device, scale: float) -> None:
    opt = torch.optim.SGD(params, lr=0.1)
    start = sum(shares[:rank])
    xs, ys = batches(steps)
    for x, y in zip(xs, ys, strict=True):
        opt.zero_grad()
        mine = slice(start, start + shares[rank])
        (loss_of(model, x[mine].to(dev), y[mine].to(dev)) * scale).backward()
        opt.step()


def collectives(dev: torch.device, rank: int, world: int, rounds: int) -> int:
    """Every collective torch and DTensor reach a process group by, checked, `rounds` times over."""
    import torch.distributed as dist
    from torch.distributed.tensor import DTensor, Shard, init_device_mesh

    mesh = init_device_mesh(dev.type, (world,))
    everyone = [float(r) for r in range(world)]
    for step in range(rounds):
        t = torch.full((4,), float(rank + step), device=dev)
        dist.all_reduce(t)
        assert t.cpu().tolist() == [sum(everyone) + world * step] * 4, t
        b = torch.full((3,), float(rank), device=dev)
        dist.broadcast(b, src=(world - 1 - step) % world)
        assert b.cpu().tolist() == [float((world - 1 - step) % world)] * 3, b
        outs = [torch.empty(2, device=dev) for _ in range(world)]
        dist.all_gather(outs, torch.full((2,), float(rank), device=dev))
        assert [o.cpu()[0].item() for o in outs] == everyone
        flat = torch.empty(2 * world, device=dev)
        dist.all_gather_into_tensor(flat, torch.full((2,), float(rank), device=dev))
        assert flat.cpu().tolist() == [r for r in everyone for _ in range(2)]
        mine = torch.empty(2, device=dev)
        dist.reduce_scatter_tensor(mine, torch.arange(2.0 * world, device=dev))
        assert mine.cpu().tolist() == [world * (2.0 * rank), world * (2.0 * rank + 1)]
        avg = torch.full((2,), float(rank + 1), device=dev)
        dist.all_reduce(avg, op=dist.ReduceOp.AVG)
        assert avg.cpu().tolist() == [(world + 1) / 2] * 2
        outs2 = [torch.empty(2 * world, device=dev), torch.empty(3 * world, device=dev)]
        with dist._coalescing_manager(async_ops=False):
            dist.all_gather_into_tensor(outs2[0], torch.full((2,), float(rank), device=dev))
            dist.all_gather_into_tensor(outs2[1], torch.full((3,), float(rank), device=dev))
        assert outs2[1].cpu().tolist() == [r for r in everyone for _ in range(3)]
        dt = DTensor.from_local(torch.full((2,), float(rank), device=dev), mesh, [Shard(0)])
        assert dt.full_tensor().cpu().tolist() == [r for r in everyone for _ in range(2)]
        if rank == 0:
            for peer in range(1, world):
                dist.send(torch.arange(3.0, device=dev) + peer, dst=peer)
        else:
            got = torch.empty(3, device=dev)
            dist.recv(got, src=0)
            assert got.cpu().tolist() == [rank + 0.0, rank + 1.0, rank + 2.0]
        objects: list = [None] * world
        dist.all_gather_object(objects, (rank, str(dev)))
        assert [o[0] for o in objects] == list(range(world))
        dist.barrier()
    return rounds


def main() -> int:
    scenario, out, *args = sys.argv[1:]
    steps = int(args[0]) if args else 20
    from torch_fl import distributed as fld

    if os.environ.get("MIXED_OTHER_VERSION_RANK") == os.environ["RANK"]:
        import torch_fl._version

        torch_fl._version.__version__ = "0.0.1+other"  # what a node with an older install reports
    report = fld.init_process_group(timeout=60)
    rank, world = torch.distributed.get_rank(), torch.distributed.get_world_size()
    dev = fld.device()
    facts = {"device": str(dev), "backend": str(torch.distributed.get_backend()),
             "plan": getattr(report, "plan", ""), "autocast": str(torch.get_autocast_dtype(dev.type))}
    if scenario == "ddp":
        shares = [GLOBAL_BATCH // world] * world
        ddp = fld.wrap_ddp(tiny_transformer())
        _train(ddp, list(ddp.parameters()), steps, shares, rank, dev, 1.0)
        state = ddp.module.state_dict()
    elif scenario == "uneven":
        weights = [float(w) for w in os.environ["MIXED_THROUGHPUT"].split(",")]
        split = fld.uneven_split(GLOBAL_BATCH, weights[rank])
        facts["shares"] = split.shares
        ddp = fld.wrap_ddp(tiny_transformer())
        _train(ddp, list(ddp.parameters()), steps, split.shares, rank, dev, split.loss_scale)
        state = ddp.module.state_dict()
    elif scenario == "fsdp":
        from torch.distributed.fsdp import fully_shard

        model = tiny_transformer().to(dev)
        fully_shard(model[1])
        fully_shard(model)
        shares = [GLOBAL_BATCH // world] * world
        _train(model, list(model.parameters()), steps, shares, rank, dev, 1.0)
        state = {k: v.full_tensor() for k, v in model.state_dict().items()}
    elif scenario == "collectives":
        facts["rounds"] = collectives(dev, rank, world, steps)
        state = {}
    else:
        raise SystemExit(f"unknown scenario {scenario}")
    torch.save({"state": {k: v.detach().cpu() for k, v in state.items()}, **facts}, Path(out) / f"rank{rank}.pt")
    torch.distributed.destroy_process_group()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
