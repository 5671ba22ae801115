"""``torch_npu.onnx`` of the emulated Ascend plugin: ONNX export of the vendor's fused ops.

Importing the vendor's ``torch_npu.onnx`` registers an ONNX symbolic for each of its custom ops, so a model that
calls them exports with a node of the vendor's ``npu`` domain (``npu::NPURmsNorm``, ``npu::NPUFastGelu``, ...),
which Ascend's ATC tool compiles. The emulated plugin does the same for the fused ops it emulates (npu_ops.py),
with the vendor's node names and attributes, for PyTorch's TorchScript exporter
(``torch.onnx.export(..., dynamo=False)``, which needs the ``onnx`` package). The aten-composed ops
(npu_composed.py: ``npu_linear``, ``npu_transpose``, ``npu_broadcast``, ...) are aten ops on the emulated chip
and export as standard ONNX. Fused attention has no node here (the vendor exports its own older
``NPUFusedAttentionScore`` instead): exporting a model that calls it fails in the exporter, saying which op.
"""

from __future__ import annotations

from typing import Any

import torch

_OPSET = 11  # the vendor registers its symbolics for opset 11 (its tests export with opset_version=11)


def _value(value: Any, kind: str) -> Any:
    """A constant argument of a symbolic as a Python value ('f' float, 'i' int), as PyTorch's helpers read it."""
    from torch.onnx import symbolic_helper

    found = symbolic_helper._maybe_get_const(value, kind)
    return None if symbolic_helper._is_value(found) and symbolic_helper._is_none(found) else found


def _rms_norm(g: Any, x: Any, gamma: Any, epsilon: Any) -> Any:
    return g.op("npu::NPURmsNorm", x, gamma, epsilon_f=float(_value(epsilon, "f")), outputs=2)


def _add_rms_norm(g: Any, x1: Any, x2: Any, gamma: Any, epsilon: Any) -> Any:
    return g.op("npu::NPURmsNorm", x1, x2, gamma, epsilon_f=float(_value(epsilon, "f")), outputs=3)


def _fast_gelu(g: Any, x: Any) -> Any:
    return g.op("npu::NPUFastGelu", x)


def _format_cast(g: Any, x: Any, acl_format: Any, customize_dtype: Any = None, input_dtype: Any = None) -> Any:
    dtype = _value(customize_dtype, "i") if customize_dtype is not None else None
    return g.op("npu::NPUFormatCast", x, acl_format_i=int(_value(acl_format, "i")),
                customize_dtype_i=int(dtype) if isinstance(dtype, int) else 0)


SYMBOLICS = {"npu::npu_rms_norm": _rms_norm, "npu::npu_add_rms_norm": _add_rms_norm,
             "npu::npu_fast_gelu": _fast_gelu, "npu::fast_gelu": _fast_gelu, "npu::npu_format_cast": _format_cast}

_registered: list[str] = []


def _add_onnx_ops() -> list[str]:
    """Register the symbolics (once); returns the ops that have one."""
    if not _registered:
        from .npu_ops import register

        register()  # (the ops must exist before their symbolics)
        for name, fn in SYMBOLICS.items():
            torch.onnx.register_custom_op_symbolic(name, fn, _OPSET)
            _registered.append(name)
    return list(_registered)


_add_onnx_ops()

__all__: list[str] = []
