"""DDP scaling of the example language model (examples/gpt.py) with torch.fl.distributed: throughput
with 1, 2, ... ranks and the scaling efficiency, against the article's target (section 4.3: 4 devices
at least 3.2x one device, i.e. 80% efficiency).

Weak scaling, as data-parallel training is used: every rank trains on its own batch of `--batch`
sequences, so the global batch grows with the ranks. Ranks are started by torchrun's launcher
(elastic_launch); each calls torch.fl.distributed.init_process_group (backend and device from the
description, preflight on) and wraps the model with torch.fl.distributed.wrap_ddp.

    python benchmarks/ddp_scaling.py                        # 1 and 2 ranks on the CPU (gloo)
    python benchmarks/ddp_scaling.py --nproc 1,2,4,8        # a node with 8 accelerators
    python benchmarks/ddp_scaling.py --nproc 1,3 --mixed emu:npu,emu:cuda,emu:mlu   # a job across vendors

On the CPU every rank gets `--threads` torch threads (default 1), so that N ranks use N cores and the
comparison is one core against N; do not ask for more ranks x threads than the machine has cores. A
control row (N independent processes without DDP) shows what the machine itself allows N processes,
so that a low efficiency can be told apart from a slow collective path.

`--mixed CHIP,CHIP,...` adds a job across vendors: the largest rank count once with every rank on the
first chip and once with the ranks cycling through the list (FL_RANK_DEVICES, so torch-fl's flmixed
group stages the gradients through the host between vendors), and prints their ratio measured in the
same run; then a model on paper of the host-staging cost for 2 to 64 ranks (bandwidth only).
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import time
import uuid
from pathlib import Path

import torch

TARGET_DEVICES, TARGET_SPEEDUP = 4, 3.2  # the article's distributed-scalability row
EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


def train(steps: int, warmup: int, batch: int, threads: int, dim: int, layers: int,
          independent: bool = False) -> dict:
    """One rank: `warmup` untimed steps, then `steps` timed ones. `independent`: no process group and
    no DDP, each process trains alone (the control: what the machine allows N processes at once)."""
    import torch.distributed as dist

    import torch_fl  # noqa: F401  (installs torch.fl)

    sys.path.insert(0, str(EXAMPLES))
    import gpt

    torch.set_num_threads(threads)
    if not independent:
        torch.fl.distributed.init_process_group()
    device = torch.fl.distributed.device()
    torch.manual_seed(0)
    model = gpt.GPT(dim=dim, layers=layers)
    ddp = model.to(device) if independent else torch.fl.distributed.wrap_ddp(model)
    optimizer = torch.optim.AdamW(ddp.parameters(), lr=1e-3)
    generator = torch.Generator().manual_seed(int(os.environ["RANK"]))
    tokens = torch.randint(0, 512, (warmup + steps, batch, 64), generator=generator).to(device)
    barrier = (lambda: None) if independent else dist.barrier

    def step(idx: torch.Tensor) -> None:
        optimizer.zero_grad(set_to_none=True)
        gpt.lm_loss(ddp(idx), idx).backward()
        optimizer.step()

    for i in range(warmup):
        step(tokens[i])
    torch.fl.synchronize(device)
    barrier()
    began = time.perf_counter()
    for i in range(warmup, warmup + steps):
        step(tokens[i])
    torch.fl.synchronize(device)
    barrier()
    seconds = time.perf_counter() - began
    result = {"seconds": seconds, "backend": "none" if independent else dist.get_backend(),
              "device": str(device), "parameters": sum(p.numel() for p in model.parameters())}
    if not independent:
        dist.destroy_process_group()
    return result


def run(nproc: int, args: argparse.Namespace, independent: bool = False) -> dict:
    from torch.distributed.launcher.api import LaunchConfig, elastic_launch

    config = LaunchConfig(min_nodes=1, max_nodes=1, nproc_per_node=nproc, rdzv_backend="c10d",
                          rdzv_endpoint="localhost:0", run_id=f"ddp-scaling-{uuid.uuid4().hex[:8]}",
                          max_restarts=0, monitor_interval=0.1, start_method="spawn")
    results = elastic_launch(config, train)(args.steps, args.warmup, args.batch, args.threads, args.dim,
                                            args.layers, independent)
    return max(results.values(), key=lambda r: r["seconds"])  # the job is as fast as its slowest rank


def paper_model(parameters: int, kinds: int, link_gbps: float, fabric_gbs: float, pcie_gbs: float) -> None:
    """Gradient all_reduce time per step, on paper (bandwidth only: no latency, no overlap with the
    backward pass): one vendor's ring over its fabric against flmixed (a ring inside each kind, the
    leaders' host copies over PCIe, gloo's ring between `kinds` leaders over the link)."""
    from torch_fl.distributed import host_traffic

    payload = parameters * 4  # float32 gradients
    print(f"\non paper: {payload / 1e6:.1f} MB of gradients per step; vendor fabric {fabric_gbs:g} GB/s, PCIe "
          f"{pcie_gbs:g} GB/s, link between vendors {link_gbps:g} Gb/s; bandwidth only (no latency, no overlap)")
    print(f"{'ranks':>5}  {'kinds':>5}  {'one vendor ms':>13}  {'flmixed ms':>10}  {'ratio':>6}  {'host MB/leader':>14}")
    for ranks in (2, 4, 8, 16, 32, 64):
        k = min(kinds, ranks)
        per_kind = ranks / k
        single = 2 * (ranks - 1) / ranks * payload / (fabric_gbs * 1e9)
        inside = 2 * 2 * (per_kind - 1) / per_kind * payload / (fabric_gbs * 1e9)  # reduce + broadcast
        cost = host_traffic(payload, k, link_gbps)
        mixed = inside + cost["device_host_bytes"] / (pcie_gbs * 1e9) + cost["link_seconds"]
        print(f"{ranks:>5}  {k:>5}  {single * 1e3:>13.2f}  {mixed * 1e3:>10.2f}  {mixed / single:>5.1f}x  "
              f"{(cost['device_host_bytes'] + 2 * cost['link_bytes']) / 1e6:>14.1f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nproc", default="1,2", help="rank counts to compare, the first is the baseline")
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--batch", type=int, default=8, help="sequences per rank and step")
    parser.add_argument("--threads", type=int, default=1, help="torch threads per rank (CPU)")
    parser.add_argument("--dim", type=int, default=256)
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--no-control", dest="control", action="store_false",
                        help="skip the control row (the largest rank count as independent processes "
                             "without DDP: the ceiling this machine allows)")
    parser.add_argument("--mixed", default="", help="chips for a job across vendors, e.g. "
                        "emu:npu,emu:cuda,emu:mlu: the largest rank count on the first chip alone and on all")
    parser.add_argument("--link-gbps", type=float, default=25.0, help="paper model: link between vendors, Gb/s")
    parser.add_argument("--fabric-gbs", type=float, default=200.0, help="paper model: a vendor's fabric, GB/s")
    parser.add_argument("--pcie-gbs", type=float, default=25.0, help="paper model: device<->host, GB/s")
    args = parser.parse_args()
    logging.getLogger("torch.distributed.elastic").setLevel(logging.ERROR)

    counts = [int(n) for n in args.nproc.split(",")]
    load = os.getloadavg()[0]  # wall-clock throughput: other processes on the machine skew it
    rows = []
    for n in counts:
        r = run(n, args)
        rows.append((str(n), n, r, n * args.batch * 64 * args.steps / r["seconds"]))
    if args.control and counts[-1] > 1:
        n = counts[-1]
        r = run(n, args, independent=True)
        rows.append((f"{n}*", n, r, n * args.batch * 64 * args.steps / r["seconds"]))
    _, base_n, _, base_tps = rows[0]
    print(f"GPT dim {args.dim}, {args.layers} layers, {rows[0][2]['parameters'] / 1e6:.2f} M parameters; "
          f"{args.batch} x 64 tokens per rank and step; {args.steps} timed steps after {args.warmup}; "
          f"{os.cpu_count()} cores, load average {load:.1f} at start")
    print(f"{'ranks':>5}  {'backend':8} {'device':8} {'global batch':>12}  {'step ms':>8}  {'tokens/s':>9}  "
          f"{'speedup':>7}  {'efficiency':>10}")
    for label, n, r, tps in rows:
        speedup = tps / base_tps
        efficiency = speedup / (n / base_n)
        print(f"{label:>5}  {r['backend']:8} {r['device'].split(':')[0]:8} {n * args.batch:>12}  "
              f"{r['seconds'] / args.steps * 1000:>8.1f}  {tps:>9.0f}  {speedup:>6.2f}x  {efficiency:>9.0%}")
    if args.control and counts[-1] > 1:
        print(f"{counts[-1]}*: the control, {counts[-1]} independent processes without DDP: the most this "
              "machine allows that many processes, whatever the communication")
    print(f"article target (section 4.3): {TARGET_DEVICES} devices >= {TARGET_SPEEDUP}x one device "
          f"({TARGET_SPEEDUP / TARGET_DEVICES:.0%} efficiency)")
    if args.mixed:
        mixed(args, counts[-1])


def mixed(args: argparse.Namespace, n: int) -> None:
    """The same job on one chip and across the --mixed chips, measured in this run; then the paper model."""
    chips = [c.strip() for c in args.mixed.split(",") if c.strip()]
    os.environ.pop("FL_DEVICE", None)
    rows = []
    for label, devices in (("one vendor", [chips[0]] * n), ("mixed", [chips[i % len(chips)] for i in range(n)])):
        os.environ["FL_RANK_DEVICES"] = ",".join(devices)  # the spawned ranks read it (torch_fl._env)
        r = run(n, args)
        rows.append((label, ",".join(devices), r))
    os.environ.pop("FL_RANK_DEVICES")
    print(f"\n{n} ranks, the same job on one chip and across vendors (FL_RANK_DEVICES), measured in this run:")
    for label, devices, r in rows:
        print(f"  {label:10} {devices:32} {r['backend']:18} step {r['seconds'] / args.steps * 1000:7.1f} ms")
    print(f"  mixed / one vendor: {rows[1][2]['seconds'] / rows[0][2]['seconds']:.2f}x step time")
    paper_model(rows[0][2]["parameters"], len(set(chips)), args.link_gbps, args.fabric_gbs, args.pcie_gbs)


if __name__ == "__main__":
    main()
