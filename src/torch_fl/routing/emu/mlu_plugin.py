"""What the emulated ``torch_mlu`` adds beyond the device module (description ``emulation.plugin_ops = "mlu_plugin"``):
its fused optimizers (``torch_mlu.optimizers``) and ``torch.backends.mlu``, which Cambricon's own tests import.

torch_mlu's FusedAdam and FusedSGD are apex's: "a drop-in replacement for torch.optim.Adam" (Cambricon/torch_mlu
torch_mlu/optimizers/fused_adam.py), AdamW's decoupled decay with ``adam_w_mode=True`` (the default), Adam's L2
decay without; FusedSGD is torch.optim.SGD. Fusion changes speed, not values, so each is PyTorch's optimizer with
the vendor's signature. The settings that change the update itself (``bias_correction=False``,
``wd_after_momentum=True``) and FusedLAMB are refused with an error saying so.

``torch.backends.mlu``: the TF32 switches (``matmul.allow_tf32``, ``custom.allow_tf32``) and the CNFFT plan cache
(``cnfft_plan_cache.max_size``, ``size``, ``clear()``), recorded: they change the chip's speed and rounding, and the
emulated chip computes in the host's float32.
"""

from __future__ import annotations

import contextlib
import sys
import types
import warnings
from collections.abc import Iterator
from typing import Any

import torch

from .npu_optim import LAMB_INSTEAD, not_emulated

PLUGIN_SUBMODULES = {"optimizers": "torch_fl.routing.emu.mlu_plugin"}


class FusedAdam(torch.optim.Adam):
    """``torch_mlu.optimizers.FusedAdam``: torch.optim.Adam with AdamW's decoupled decay (adam_w_mode=True) or
    Adam's L2 decay (False)."""

    def __init__(self, params: Any, lr: float = 1e-3, bias_correction: bool = True,
                 betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-8, adam_w_mode: bool = True,
                 weight_decay: float = 0.0, amsgrad: bool = False, set_grad_none: bool = True) -> None:
        if amsgrad:
            raise RuntimeError("FusedAdam does not support the AMSGrad variant.")
        if not bias_correction:
            raise NotImplementedError("torch_mlu.optimizers.FusedAdam(bias_correction=False) is not emulated by "
                                      "torch-fl (torch.optim has no Adam without bias correction); use the default")
        super().__init__(params, lr=lr, betas=betas, eps=eps, weight_decay=weight_decay,
                         decoupled_weight_decay=bool(adam_w_mode))


class FusedSGD(torch.optim.SGD):
    """``torch_mlu.optimizers.FusedSGD``: torch.optim.SGD."""

    def __init__(self, params: Any, lr: float = 1e-3, momentum: float = 0, dampening: float = 0,
                 weight_decay: float = 0, nesterov: bool = False, wd_after_momentum: bool = False,
                 materialize_master_grads: bool = True, set_grad_none: bool = False) -> None:
        if wd_after_momentum:
            raise NotImplementedError("torch_mlu.optimizers.FusedSGD(wd_after_momentum=True) is not emulated by "
                                      "torch-fl (torch.optim.SGD applies weight decay before momentum); use False")
        super().__init__(params, lr=lr, momentum=momentum, dampening=dampening, weight_decay=weight_decay,
                         nesterov=nesterov)


FusedLAMB = not_emulated("torch_mlu.optimizers.FusedLAMB", LAMB_INSTEAD, "MLU", module=__name__)


FusedLAMBAMP = FusedLAMB


class _Switches:
    def __init__(self, **values: Any) -> None:
        self.__dict__.update(values)


class _MatmulTF32:
    """``torch.backends.mlu.matmul``: ``allow_tf32`` is PyTorch's float32 matmul precision, as
    ``torch.backends.cuda.matmul.allow_tf32`` is (torch_mlu's CnnlMatmulTF32Controller; its tests expect
    ``set_float32_matmul_precision("high")`` to turn it on). The host computes float32 either way."""

    def __getattr__(self, name: str) -> Any:
        if name == "allow_tf32":
            return _get_cnmatmul_allow_tf32()
        raise AssertionError("Unknown attribute " + name)  # (the vendor's own error)

    def __setattr__(self, name: str, value: Any) -> None:
        if name != "allow_tf32":
            raise AssertionError("Unknown attribute " + name)
        _set_cnmatmul_allow_tf32(value)


def _get_cnmatmul_allow_tf32() -> bool:
    """torch_mlu's binding: TF32 in CNNL matmuls is on when the float32 matmul precision is not 'highest' (or
    TORCH_ALLOW_TF32_CNMATMUL_OVERRIDE / TORCH_ALLOW_TF32_CUBLAS_OVERRIDE is set)."""
    import os

    override = any(os.environ.get(name, "0") not in ("", "0") for name in
                   ("TORCH_ALLOW_TF32_CNMATMUL_OVERRIDE", "TORCH_ALLOW_TF32_CUBLAS_OVERRIDE"))
    return override or torch.get_float32_matmul_precision() != "highest"


def _set_cnmatmul_allow_tf32(value: bool) -> None:
    torch.set_float32_matmul_precision("high" if value else "highest")


def _fake_set_cublas_allow_tf32(value: bool) -> None:
    """What ``import torch_mlu`` puts in place of torch._C._set_cublas_allow_tf32: the float32 matmul precision is
    device independent, so the CUDA switch must not move the MLU's (it warns and does nothing, as the vendor's)."""
    if not isinstance(value, bool):
        raise RuntimeError(f"set_allow_tf32_cublas expects a bool, but got {type(value)}")
    warnings.warn("When using MLU device, the cuda API does not take effect. Please use "
                  "torch.backends.mlu.matmul.allow_tf32.", stacklevel=2)


class _Cnnl:
    """``torch.backends.cnnl``: ``allow_tf32`` (TF32 in CNNL convolutions, on by default, as cuDNN's) and the
    ``flags(...)`` context manager; enabled/benchmark/deterministic have no MLU meaning and warn, as the vendor's."""

    def __init__(self) -> None:
        self.allow_tf32 = True

    def set_flags(self, _enabled: Any = None, _benchmark: Any = None, _benchmark_limit: Any = None,
                  _deterministic: Any = None, _allow_tf32: Any = None) -> tuple:
        previous = (None, None, None, None, self.allow_tf32)
        for name, value in (("enabled", _enabled), ("benchmark", _benchmark), ("deterministic", _deterministic)):
            if value is True:
                warnings.warn(f"torch.backends.cnnl.{name} is not available on MLU device.", stacklevel=3)
        if _benchmark_limit not in (None, 0):
            warnings.warn("torch.backends.cnnl.benchmark_limit is not available on MLU device.", stacklevel=3)
        if _allow_tf32 is not None:
            self.allow_tf32 = bool(_allow_tf32)
        return previous

    @contextlib.contextmanager
    def flags(self, enabled: bool = False, benchmark: bool = False, benchmark_limit: int = 0,
              deterministic: bool = False, allow_tf32: bool = True) -> Iterator[None]:
        previous = self.set_flags(enabled, benchmark, benchmark_limit, deterministic, allow_tf32)
        try:
            yield
        finally:
            self.set_flags(*previous)


class _PlanCache:
    """``torch.backends.mlu.cnfft_plan_cache``: there are no FFT plans to cache on the host (size 0)."""

    def __init__(self) -> None:
        self.max_size = 4096
        self.size = 0

    def clear(self) -> None:
        self.size = 0


def _backends_mlu() -> types.ModuleType:
    module = types.ModuleType("torch.backends.mlu", "torch-fl's emulation of torch_mlu's torch.backends.mlu")
    module.matmul = _MatmulTF32()  # type: ignore[attr-defined]
    module.custom = _Switches(allow_tf32=False)  # type: ignore[attr-defined]
    module.cnfft_plan_cache = _PlanCache()  # type: ignore[attr-defined]
    return module


def device_module_calls() -> dict[str, Any]:
    """What torch_mlu adds to torch.mlu: cnpx, its profiler annotations (ranges of the host trace here)."""
    from . import profiler_ranges

    return {"cnpx": profiler_ranges}


def attach(module: Any) -> Any:
    """``import torch_mlu`` registers ``torch.backends.mlu``, as the plugin does."""
    if not hasattr(torch.backends, "mlu"):
        backends = _backends_mlu()
        torch.backends.mlu = backends  # type: ignore[attr-defined]
        sys.modules["torch.backends.mlu"] = backends
        torch.backends.cnnl = _Cnnl()  # type: ignore[attr-defined]
        # (as the vendor's import: the CNNL matmul TF32 bindings on torch._C, the CUDA switch made inert)
        torch._C._get_cnmatmul_allow_tf32 = _get_cnmatmul_allow_tf32  # type: ignore[attr-defined]
        torch._C._set_cnmatmul_allow_tf32 = _set_cnmatmul_allow_tf32  # type: ignore[attr-defined]
        torch._C._set_cublas_allow_tf32 = _fake_set_cublas_allow_tf32
    return module


__all__ = ["FusedAdam", "FusedLAMB", "FusedLAMBAMP", "FusedSGD"]
