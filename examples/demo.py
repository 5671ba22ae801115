"""`make demo`: train the example GPT for a few steps on random tokens on torch.fl.device().

The model code never names a vendor: the device is a symbol (FL_DEVICE, default acc0) that torch-fl
maps to cuda:0, npu:0, mps, cpu, ... Run `FL_DEVICE=emu:minimal python examples/demo.py` to check a
chip you do not have.
"""

from __future__ import annotations

import argparse
import time

import torch
from gpt import factory

import torch_fl  # noqa: F401  (installs torch.fl)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--device", default=None, help="virtual id or physical name (default: FL_DEVICE/acc0)")
    args = parser.parse_args()

    # Build on the host, then move to the device: what a training script does on any chip.
    model, (tokens,), loss_fn = factory()
    device = torch.fl.device(args.device)
    activation = torch.fl.routing.active()
    desc = activation.description if activation else torch.fl.description()
    emulated = bool(activation and activation.emulated)
    print(f"device {device} ({desc.vendor} {desc.name}{', emulated' if emulated else ''}"
          f", {torch.fl.backend().source}); devices: {[str(d) for d in torch.fl.devices()]}")
    model.to(device)
    tokens = tokens.to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    torch.fl.manual_seed(0)
    start = time.perf_counter()
    for step in range(1, args.steps + 1):
        optimizer.zero_grad(set_to_none=True)
        loss = loss_fn(model(tokens), tokens)
        loss.backward()
        optimizer.step()
        if step == 1 or step % 5 == 0 or step == args.steps:
            print(f"step {step:3d}  loss {loss.item():.4f}")  # noqa: FL203 (every 5th step only)
    torch.fl.synchronize(device)
    elapsed = time.perf_counter() - start
    # torch.fl.max_memory_allocated counts what the device's memory is: on the host CPU the process's
    # resident set (interpreter and libraries included), elsewhere (an emulated chip too) bytes held by
    # tensors; one name for both would compare two different things
    host = desc.section("memory")["allocator"] == "host" and not emulated
    what = "peak process memory (resident set)" if host else f"peak tensor memory on {device}"
    print(f"{args.steps} steps in {elapsed:.2f} s ({args.steps / elapsed:.1f} steps/s); "
          f"{what} {torch.fl.max_memory_allocated(device) / 2**20:.0f} MiB")
    routed = torch.fl.route_stats()
    if routed:
        calls = sum(r["calls"] for r in routed)
        kinds = sorted({r["route"] for r in routed})
        print(f"non-native calls: {calls} over {len(routed)} (op, dtype) pairs ({', '.join(kinds)}); "
              f"see torch.fl.route_stats() or FL_ROUTE_LOG")


if __name__ == "__main__":
    main()
