"""A torchrun script for jobs whose ranks run on different emulated chips (FL_RANK_DEVICES).

    FL_RANK_DEVICES=emu:npu,emu:cuda,emu:mlu torchrun --nproc-per-node 3 mixed_workers.py SCENARIO OUT [ARGS]

Every scenario (ddp, uneven, fsdp) trains `tiny_transformer` on its share of one global batch per step and writes this
rank's final weights and facts to OUT/rank<N>.pt; the test compares them with `reference_weights`, the
same training as one process on the whole batch.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import torch
from torch import nn

import torch_fl  # noqa: F401

VOCAB, WIDTH, CONTEXT, GLOBAL_BATCH = 32, 16, 6, 12


def tiny_transformer() -> nn.Module:
    torch.manual_seed(0)
    layer = nn.TransformerEncoderLayer(WIDTH, nhead=2, dim_feedforward=32, dropout=0.0, batch_first=True)
    return nn.Sequential(nn.Embedding(VOCAB, WIDTH), layer, nn.Linear(WIDTH, VOCAB))


def batches(steps: int) -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(1)
    tokens = torch.randint(0, VOCAB, (steps, GLOBAL_BATCH, CONTEXT), generator=generator)
    return tokens, torch.roll(tokens, -1, dims=-1)


def loss_of(model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return nn.functional.cross_entropy(model(x).reshape(-1, VOCAB), y.reshape(-1))


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
    else:
        raise SystemExit(f"unknown scenario {scenario}")
    torch.save({"state": {k: v.detach().cpu() for k, v in state.items()}, **facts}, Path(out) / f"rank{rank}.pt")
    torch.distributed.destroy_process_group()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
