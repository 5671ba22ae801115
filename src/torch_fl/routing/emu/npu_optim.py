"""``torch_npu.optim`` of the emulated Ascend plugin: the vendor's tensor-fusion optimizers.

Ascend documents NpuFusedSGD, NpuFusedAdadelta, NpuFusedAdam, NpuFusedAdamW and NpuFusedRMSprop as "the
core functionality compatible with torch.optim.X" (Ascend/op-plugin docs/zh/custom_APIs/torch_npu-optim/,
torch_npu-optim_list.md and one page each): fusion packs the parameters into one buffer to launch fewer
kernels, which changes speed, not the update. So each is PyTorch's optimizer with the vendor's signature
and defaults (NpuFusedAdamW's weight_decay=1e-2, as torch's), running the chip's ops on the emulated device.

The ones whose update is the vendor's own (NpuFusedLamb, NpuFusedBertAdam, NpuFusedRMSpropTF, NpuFusedAdamP)
are not emulated: constructing one raises an error naming the class and the torch.optim replacement, rather
than computing something that only looks like it.
"""

from __future__ import annotations

from typing import Any

import torch


class NpuFusedOptimizerBase(torch.optim.Optimizer):
    """The vendor's base class (``torch_npu.optim.npu_fused_optim_base``): a torch Optimizer."""

    def __init__(self, params: Any, default: dict[str, Any]) -> None:
        super().__init__(params, default)


def _clip_grad_norm_fused_(self: Any, max_norm: float, norm_type: float = 2) -> torch.Tensor:
    """The vendor's fused clipping: the gradients of all of this optimizer's parameters clipped to `max_norm`
    in `norm_type` norm together (over its combined gradient buffer on the chip); returns the total norm, in
    float32 as the vendor's (whatever the gradients' dtypes)."""
    params = [p for group in self.param_groups for p in group["params"] if p.grad is not None]
    return torch.nn.utils.clip_grad_norm_(params, max_norm, norm_type=norm_type).float()


def _compatible(base: type, name: str) -> type:
    # foreach=False: the vendor's fused update is one kernel per buffer; PyTorch's per-tensor loop computes
    # the same values on every chip (the foreach path is the emulator's choice to make per chip, slot.py)
    def __init__(self: Any, params: Any, *args: Any, **kwargs: Any) -> None:
        base.__init__(self, params, *args, **kwargs)

    return type(name, (base,), {"__init__": __init__, "__module__": __name__,
                                "clip_grad_norm_fused_": _clip_grad_norm_fused_,
                                "__doc__": f"``torch_npu.optim.{name}``: torch.optim.{base.__name__} (the vendor "
                                           f"documents the core as compatible with it)."})


NpuFusedSGD = _compatible(torch.optim.SGD, "NpuFusedSGD")
NpuFusedAdadelta = _compatible(torch.optim.Adadelta, "NpuFusedAdadelta")
NpuFusedAdam = _compatible(torch.optim.Adam, "NpuFusedAdam")
NpuFusedAdamW = _compatible(torch.optim.AdamW, "NpuFusedAdamW")
NpuFusedRMSprop = _compatible(torch.optim.RMSprop, "NpuFusedRMSprop")


def not_emulated(qualified: str, instead: str, chip: str, base: type = torch.optim.Optimizer,
                 module: str = __name__) -> type:
    """A vendor optimizer class whose update is the vendor's own (every plugin's LAMB, ...): constructing it
    raises, naming `qualified` ('torch_npu.optim.NpuFusedLamb'), the replacement `instead` and the real `chip`."""
    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        raise NotImplementedError(
            f"{qualified} is not emulated by torch-fl: its update is the vendor's own (not torch.optim's), and an "
            f"approximation would train differently from the {chip}. Use {instead} to run on the emulated chip, or "
            f"check this optimizer on the real {chip}")

    name = qualified.rsplit(".", 1)[1]
    return type(name, (base,), {"__init__": __init__, "__module__": module,
                                "__doc__": f"``{qualified}``: not emulated (its update is the vendor's own)."})


LAMB_INSTEAD = "a LAMB implementation in Python (e.g. torch_optimizer.Lamb)"  # (every plugin has a fused LAMB)


def _not_emulated(name: str, instead: str) -> type:
    return not_emulated(f"torch_npu.optim.{name}", instead, "NPU", NpuFusedOptimizerBase)


NpuFusedLamb = _not_emulated("NpuFusedLamb", LAMB_INSTEAD)
NpuFusedBertAdam = _not_emulated("NpuFusedBertAdam", "torch.optim.AdamW with a warmup schedule")
NpuFusedRMSpropTF = _not_emulated("NpuFusedRMSpropTF", "torch.optim.RMSprop (eps outside the square root)")
NpuFusedAdamP = _not_emulated("NpuFusedAdamP", "torch.optim.AdamW")

__all__ = ["NpuFusedAdadelta", "NpuFusedAdam", "NpuFusedAdamP", "NpuFusedAdamW", "NpuFusedBertAdam",
           "NpuFusedLamb", "NpuFusedOptimizerBase", "NpuFusedRMSprop", "NpuFusedRMSpropTF", "NpuFusedSGD"]
