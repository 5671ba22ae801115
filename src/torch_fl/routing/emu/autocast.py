"""Autocast on the emulated device (``torch.autocast("emu")``, ``torch.fl.autocast()`` under emulation).

A vendor backend registers C++ kernels on its AutocastPrivateUse1 key; the Python ``emu`` backend
registers Python ones for the ops PyTorch's CUDA autocast casts (the same three policies: lower
precision, float32, widest type) and a fallthrough for every other op. The lower-precision dtype is
``torch.get_autocast_dtype("emu")``, which torch-fl sets from the emulated description's
``precision.autocast_dtype`` (``float16`` on ``minimal``, where CPU autocast would pick ``bfloat16``,
which that chip lacks).
"""

from __future__ import annotations

from typing import Any

import torch

KEY = "AutocastPrivateUse1"

# The ops and policies of aten/src/ATen/autocast_mode.cpp (CUDA), by op name (every overload).
LOWER_PRECISION = (
    "_convolution", "conv1d", "conv2d", "conv3d", "conv_tbc", "conv_transpose1d", "conv_transpose2d",
    "conv_transpose3d", "convolution", "prelu", "addmm", "addmv", "addr", "matmul", "einsum", "mm", "mv",
    "linalg_vecdot", "linear", "addbmm", "baddbmm", "bmm", "chain_matmul", "linalg_multi_dot",
    "_thnn_fused_lstm_cell", "_thnn_fused_gru_cell", "lstm_cell", "gru_cell", "rnn_tanh_cell",
    "rnn_relu_cell", "_scaled_dot_product_flash_attention", "scaled_dot_product_attention",
)
FLOAT32 = (
    "acos", "asin", "cosh", "erfinv", "exp", "expm1", "log", "log10", "log2", "log1p", "reciprocal", "rsqrt",
    "sinh", "tan", "pow", "softplus", "layer_norm", "native_layer_norm", "group_norm", "frobenius_norm",
    "nuclear_norm", "cosine_similarity", "poisson_nll_loss", "cosine_embedding_loss", "nll_loss",
    "nll_loss2d", "hinge_embedding_loss", "kl_div", "l1_loss", "smooth_l1_loss", "huber_loss", "mse_loss",
    "margin_ranking_loss", "multilabel_margin_loss", "soft_margin_loss", "triplet_margin_loss",
    "multi_margin_loss", "binary_cross_entropy_with_logits", "dist", "pdist", "cdist", "renorm",
    "logsumexp", "softmax", "log_softmax", "cross_entropy_loss", "norm", "cumsum", "cumprod", "prod", "sum",
)
WIDEST = ("addcdiv", "addcmul", "atan2", "bilinear", "cross", "dot", "grid_sampler", "index_put",
          "tensordot", "scatter_add", "stack", "cat")

_library: list[Any] = []


def _eligible(value: Any, device_type: str) -> bool:
    return isinstance(value, torch.Tensor) and value.is_floating_point() and value.dtype != torch.float64 \
        and value.device.type == device_type


def _cast_all(values: Any, dtype: torch.dtype, device_type: str) -> Any:
    if isinstance(values, (list, tuple)):
        return type(values)(_cast_all(v, dtype, device_type) for v in values)
    return values.to(dtype) if _eligible(values, device_type) and values.dtype != dtype else values


def _widest(values: Any, device_type: str) -> torch.dtype | None:
    widest = None
    for value in values:
        for one in value if isinstance(value, (list, tuple)) else (value,):
            if _eligible(one, device_type):
                widest = one.dtype if widest is None else torch.promote_types(widest, one.dtype)
    return widest


def _kernel(ovl: Any, policy: str, device_type: str) -> Any:
    exclude = torch._C.DispatchKeySet(torch._C.DispatchKey.AutocastPrivateUse1)

    def autocast(*args: Any, **kwargs: Any) -> Any:
        if policy == "lower":
            dtype = torch.get_autocast_dtype(device_type)
        elif policy == "float32":
            dtype = torch.float32
        else:
            dtype = _widest((*args, *kwargs.values()), device_type)
        with torch._C._ExcludeDispatchKeyGuard(exclude):
            if dtype is not None:
                args = _cast_all(args, dtype, device_type)
                kwargs = {k: _cast_all(v, dtype, device_type) for k, v in kwargs.items()}
            return ovl(*args, **kwargs)

    return autocast


def register(device_type: str) -> None:
    """Autocast kernels on AutocastPrivateUse1 for `device_type` (once per process)."""
    if _library:
        return
    fallback = torch.library.Library("_", "IMPL")
    fallback.fallback(torch.library.fallthrough_kernel, KEY)
    per_op = torch.library.Library("aten", "IMPL")
    for names, policy in ((LOWER_PRECISION, "lower"), (FLOAT32, "float32"), (WIDEST, "widest")):
        for name in names:
            packet = getattr(torch.ops.aten, name, None)
            if packet is None:
                continue
            for overload in packet.overloads():
                ovl = getattr(packet, overload)
                if torch.Tag.inplace_view in ovl.tags or "out" in overload:
                    continue
                per_op.impl(ovl._schema.name.split("::", 1)[1] +
                            ("" if overload == "default" else f".{overload}"),
                            _kernel(ovl, policy, device_type), KEY)
    _library.extend((fallback, per_op))
