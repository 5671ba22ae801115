"""What the emulated Ascend fused ops share (routing/emu/npu_ops.py registers them): the namespace, the
vendor's layouts, modes and storage formats, argument checks in the vendor's words, the accumulation
dtype, and the record of one op (its schema, reference kernel, fake and autograd)."""

from __future__ import annotations

import difflib
from collections.abc import Callable
from dataclasses import dataclass
from enum import IntEnum
from typing import Any

import torch

from ...errors import VendorOpError

NAMESPACE = "npu"
KERNEL_SOURCE = ("the vendor's fused kernel (torch_npu), computed by torch-fl's reference math in aten ops "
                 "(routing/emu/npu_ops.py)")
LAYOUTS = ("BSH", "SBH", "BSND", "BNSD", "TND")
ROTARY_MODES = ("half", "interleave")
GELU_APPROXIMATIONS = ("none", "tanh")
NO_LIMIT = 2147483647


class Format(IntEnum):
    """``torch_npu.Format``: the chip's storage formats (ACL format ids, torch_npu/npu/_format.py)."""

    UNDEFINED = -1
    NCHW = 0
    NHWC = 1
    ND = 2
    NC1HWC0 = 3
    FRACTAL_Z = 4
    NC1HWC0_C04 = 12
    HWCN = 16
    NDHWC = 27
    FRACTAL_NZ = 29
    NCDHW = 30
    NDC1HWC0 = 32
    FRACTAL_Z_3D = 33
    NC = 35
    NCL = 47
    FRACTAL_NZ_C0_16 = 50
    FRACTAL_NZ_C0_32 = 51
    FRACTAL_NZ_C0_2 = 52
    FRACTAL_NZ_C0_4 = 53
    FRACTAL_NZ_C0_8 = 54

    def __str__(self) -> str:
        return self.name


# --- helpers ----------------------------------------------------------------------------------------------
def did_you_mean(value: str, choices: tuple[str, ...]) -> str:
    close = difflib.get_close_matches(str(value).upper(), [c.upper() for c in choices], n=1, cutoff=0.5)
    if not close:
        return ""
    return f"; did you mean '{choices[[c.upper() for c in choices].index(close[0])]}'?"


def choice(op: str, name: str, value: Any, choices: tuple[str, ...]) -> None:
    if value not in choices:
        raise VendorOpError(f"{op}: {name} '{value}' is not one of {', '.join(choices)}"
                         f"{did_you_mean(value, choices)}")


def compute_dtype(*tensors: torch.Tensor | None) -> torch.dtype:
    """The dtype the vendor's kernels accumulate in: float32 (float64 stays float64, for gradcheck)."""
    dtype = torch.float32
    for t in tensors:
        if t is not None and t.dtype == torch.float64:
            dtype = torch.float64
    return dtype


def base_format(t: torch.Tensor) -> int:
    """The format torch_npu gives a new tensor (InferFormat::GuessBaseFormat): NCDHW for 5-d, NCHW for
    4-d, ND otherwise."""
    return int(Format.NCDHW if t.dim() == 5 else Format.NCHW if t.dim() == 4 else Format.ND)



def ints(values: Any) -> list[int] | None:
    if values is None:
        return None
    return [int(x) for x in (values.tolist() if isinstance(values, torch.Tensor) else values)]


@dataclass(frozen=True)
class FusedOp:
    schema: str                       # the vendor's schema, as in op_plugin_functions.yaml
    kernel: Callable[..., Any]        # reference math in aten ops
    fake: Callable[..., Any] | None   # shapes only
    backward: Callable[..., Any] | None = None
    setup: Callable[..., Any] | None = None

    @property
    def name(self) -> str:
        return self.schema.split("(", 1)[0]


