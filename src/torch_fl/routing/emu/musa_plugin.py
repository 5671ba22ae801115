"""What the emulated ``torch_musa`` adds beyond the device module (description ``emulation.plugin_ops = "musa_plugin"``):
its fused optimizers, ``torch_musa.optim``, and ``torch_musa.core._utils`` (musa_core.py).

torch_musa documents FusedAdam and FusedAdamW as "the same functionality as torch.optim.Adam(fused=True)"
(MooreThreads/torch_musa torch_musa/optim/fused_adam.py, fused_adamw.py): fusion batches the elementwise updates into
fewer kernel launches, which changes speed, not values. So each is PyTorch's optimizer with the vendor's signature
and defaults (FusedAdamW's weight_decay=1e-2). FusedLAMB's update is its own: not emulated, with an error saying so.
The package's top level is the device module itself (``torch.musa`` is ``torch_musa``: description
``emulation.plugin_is_device_module``).
"""

from __future__ import annotations

from typing import Any

import torch

from .npu_optim import LAMB_INSTEAD, not_emulated

# submodules of the emulated torch_musa: name under torch_musa -> the module that is it (plugin.py)
PLUGIN_SUBMODULES = {"optim": "torch_fl.routing.emu.musa_plugin",
                     "core._utils": "torch_fl.routing.emu.musa_core",  # (the vendor's test framework imports it)
                     "utils.musa_extension": "torch_fl.routing.emu.musa_memory"}


def device_module_calls() -> dict[str, Any]:
    """torch.musa.memory (with its memory pools), as importing the vendor's plugin adds it (musa_memory.py)."""
    from .musa_memory import device_module_calls as calls

    return calls()


def _fused(base: type, name: str, weight_decay: float) -> type:
    def __init__(self: Any, params: Any, lr: float | torch.Tensor = 1e-3, betas: tuple[float, float] = (0.9, 0.999),
                 eps: float = 1e-8, weight_decay: float = weight_decay, amsgrad: bool = False, *,
                 maximize: bool = False, capturable: bool = False, differentiable: bool = False) -> None:
        base.__init__(self, params, lr=lr, betas=betas, eps=eps, weight_decay=weight_decay, amsgrad=amsgrad,
                      maximize=maximize, capturable=capturable, differentiable=differentiable)

    return type(name, (base,), {"__init__": __init__, "__module__": __name__,
                                "__doc__": f"``torch_musa.optim.{name}``: torch.optim.{base.__name__} (the vendor "
                                           f"documents it as the same functionality)."})


FusedAdam = _fused(torch.optim.Adam, "FusedAdam", 0.0)
FusedAdamW = _fused(torch.optim.AdamW, "FusedAdamW", 1e-2)


FusedLAMB = not_emulated("torch_musa.optim.FusedLAMB", LAMB_INSTEAD, "MUSA GPU", module=__name__)


# torch.version.musa: the MUSA SDK the plugin was built with, as torch_musa sets it on import
# (torch_musa/__init__.py: setattr(torch.version, "musa", torch_musa._MUSAC._musa_version), the SDK's MUSA_VERSION
# macro as a string: major * 1000 + minor * 10 + patch, as its cmake/utils.cmake parse_real_musa_version and its
# tests' get_musa_version compute it). 4.3.0: the newest SDK line the pinned torch_musa (8b583b3) builds against
# by name (CMakeLists.txt: mublasLt "since 4.3.0"); its tests gate on it (test_memory_expandable_segments.py:
# float(torch.version.musa) >= 4000, test_attention_base.py: >= 4020).
MUSA_VERSION = "4030"


def attach(module: Any) -> Any:
    """torch.version.musa, as importing the plugin sets it; torch_musa's ops are aten ops on the device."""
    torch.version.musa = MUSA_VERSION  # type: ignore[attr-defined]
    return module


__all__ = ["FusedAdam", "FusedAdamW", "FusedLAMB"]
