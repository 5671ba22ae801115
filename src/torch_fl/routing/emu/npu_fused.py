"""The norms, rotary embedding, activations, softmax, transposes, AdamW and formats of an emulated Ascend
chip's fused ops: reference math in aten ops and the ops' records (registered by npu_ops.register())."""

from __future__ import annotations

import math
from typing import Any

import torch

from ...errors import VendorOpError
from .npu_common import (
    GELU_APPROXIMATIONS,
    ROTARY_MODES,
    Format,
    FusedOp,
    base_format,
    choice,
    compute_dtype,
    did_you_mean,
)


# --- norms, rotary, activations ---------------------------------------------------------------------------
def _norm_dims(op: str, x: torch.Tensor, gamma: torch.Tensor) -> tuple[int, ...]:
    if gamma.dim() == 0 or gamma.dim() > x.dim() or tuple(x.shape[x.dim() - gamma.dim():]) != tuple(gamma.shape):
        raise VendorOpError(f"{op}: gamma of shape {tuple(gamma.shape)} must be the trailing dimensions of the "
                         f"input's shape {tuple(x.shape)}")
    return tuple(range(x.dim() - gamma.dim(), x.dim()))


def _rms_norm(x: torch.Tensor, gamma: torch.Tensor, epsilon: float = 1e-6) -> tuple[torch.Tensor, torch.Tensor]:
    dims = _norm_dims("npu_rms_norm", x, gamma)
    ct = compute_dtype(x, gamma)
    xf = x.to(ct)
    rstd = torch.rsqrt(xf.pow(2).mean(dims, keepdim=True) + epsilon)
    return (xf * rstd * gamma.to(ct)).to(x.dtype), rstd


def _rms_norm_fake(x: torch.Tensor, gamma: torch.Tensor, epsilon: float = 1e-6) -> tuple:
    dims = _norm_dims("npu_rms_norm", x, gamma)
    shape = [1 if i in dims else s for i, s in enumerate(x.shape)]
    return x.new_empty(x.shape), x.new_empty(shape, dtype=compute_dtype(x, gamma))


def _rms_norm_backward(dy: torch.Tensor, x: torch.Tensor, gamma: torch.Tensor,
                       rstd: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    dims = _norm_dims("npu_rms_norm_backward", x, gamma)
    ct = compute_dtype(x, gamma)
    xhat = x.to(ct) * rstd.to(ct)
    dxhat = dy.to(ct) * gamma.to(ct)
    dx = rstd.to(ct) * (dxhat - xhat * (dxhat * xhat).mean(dims, keepdim=True))
    dgamma = (dy.to(ct) * xhat).sum_to_size(gamma.shape)
    return dx.to(x.dtype), dgamma.to(gamma.dtype)


def _rms_norm_backward_fake(dy: torch.Tensor, x: torch.Tensor, gamma: torch.Tensor, rstd: torch.Tensor) -> tuple:
    return x.new_empty(x.shape), gamma.new_empty(gamma.shape)


def _rms_setup(ctx: Any, inputs: tuple, output: tuple) -> None:
    x, gamma, _ = inputs
    ctx.save_for_backward(x, gamma, output[1])
    ctx.mark_non_differentiable(output[1])


def _rms_backward(ctx: Any, dy: torch.Tensor, _drstd: Any) -> tuple:
    x, gamma, rstd = ctx.saved_tensors
    dx, dgamma = torch.ops.npu.npu_rms_norm_backward(dy, x, gamma, rstd)
    return dx, dgamma, None


def _add_rms_norm(x1: torch.Tensor, x2: torch.Tensor, gamma: torch.Tensor, epsilon: float = 1e-6) -> tuple:
    x = x1 + x2
    y, rstd = _rms_norm(x, gamma, epsilon)
    return y, rstd, x


def _add_rms_norm_fake(x1: torch.Tensor, x2: torch.Tensor, gamma: torch.Tensor, epsilon: float = 1e-6) -> tuple:
    if tuple(x1.shape) != tuple(x2.shape):
        raise VendorOpError(f"npu_add_rms_norm: x1 {tuple(x1.shape)} and x2 {tuple(x2.shape)} must have one shape")
    y, rstd = _rms_norm_fake(x1, gamma, epsilon)
    return y, rstd, x1.new_empty(x1.shape)


def _add_rms_setup(ctx: Any, inputs: tuple, output: tuple) -> None:
    _, _, gamma, _ = inputs
    ctx.save_for_backward(output[2], gamma, output[1])
    ctx.mark_non_differentiable(output[1])


def _add_rms_backward(ctx: Any, dy: torch.Tensor, _drstd: Any, dx_out: torch.Tensor | None) -> tuple:
    x, gamma, rstd = ctx.saved_tensors
    dx, dgamma = torch.ops.npu.npu_rms_norm_backward(dy, x, gamma, rstd)
    if dx_out is not None:
        dx = dx + dx_out
    return dx, dx, dgamma, None


def _rotate(x: torch.Tensor, rotary_mode: str) -> torch.Tensor:
    """half: cat(-x2, x1) of the two halves; interleave: (-x[1::2], x[::2]) pairs."""
    if rotary_mode == "half":
        x1, x2 = x.chunk(2, dim=-1)
        return torch.cat((-x2, x1), dim=-1)
    return torch.stack((-x[..., 1::2], x[..., ::2]), dim=-1).flatten(-2)


def _rotate_transposed(u: torch.Tensor, rotary_mode: str) -> torch.Tensor:
    """The transpose of `_rotate` (the backward of the rotation)."""
    if rotary_mode == "half":
        u1, u2 = u.chunk(2, dim=-1)
        return torch.cat((u2, -u1), dim=-1)
    return torch.stack((u[..., 1::2], -u[..., ::2]), dim=-1).flatten(-2)


def _check_rotary(op: str, x: torch.Tensor, r1: torch.Tensor, r2: torch.Tensor, rotary_mode: str,
                  rotate: torch.Tensor | None = None) -> None:
    if rotary_mode not in ROTARY_MODES:
        # the vendor's own message (op_plugin RotaryMulKernelNpuOpApi.cpp), which its tests match
        raise VendorOpError(f"The rotary_mode of {op} should be half or interleave, but got {rotary_mode}"
                            f"{did_you_mean(rotary_mode, ROTARY_MODES)}")
    if x.dim() == 0 or x.shape[-1] % 2:
        raise VendorOpError(f"{op}: the last dimension of the input (D = {x.shape[-1] if x.dim() else 0}) must be "
                         f"even (the rotation pairs its elements)")
    for name, r in (("r1", r1), ("r2", r2)):
        try:
            if tuple(torch.broadcast_shapes(x.shape, r.shape)) != tuple(x.shape):
                raise RuntimeError
        except RuntimeError:
            raise VendorOpError(f"{op}: {name} of shape {tuple(r.shape)} does not broadcast to the input's "
                             f"{tuple(x.shape)} (for BSND x, cos/sin are 1S1D, BS1D or BSND)") from None
    if rotate is not None and tuple(rotate.shape) != (x.shape[-1], x.shape[-1]):
        raise VendorOpError(f"{op}: rotate must be a (D, D) = ({x.shape[-1]}, {x.shape[-1]}) matrix, got "
                         f"{tuple(rotate.shape)}")


def _rotary_mul(x: torch.Tensor, r1: torch.Tensor, r2: torch.Tensor, rotary_mode: str = "half",
                rotate: torch.Tensor | None = None) -> torch.Tensor:
    _check_rotary("npu_rotary_mul", x, r1, r2, rotary_mode, rotate)
    turned = torch.matmul(x, rotate) if rotate is not None else _rotate(x, rotary_mode)
    return (x * r1 + turned * r2).to(x.dtype)


def _rotary_mul_fake(x: torch.Tensor, r1: torch.Tensor, r2: torch.Tensor, rotary_mode: str = "half",
                     rotate: torch.Tensor | None = None) -> torch.Tensor:
    _check_rotary("npu_rotary_mul", x, r1, r2, rotary_mode, rotate)
    return x.new_empty(x.shape)


def _rotary_mul_backward(grad: torch.Tensor, x: torch.Tensor, r1: torch.Tensor, r2: torch.Tensor,
                         rotary_mode: str = "half") -> tuple:
    _check_rotary("npu_rotary_mul_backward", x, r1, r2, rotary_mode)
    dx = grad * r1 + _rotate_transposed(grad * r2, rotary_mode)
    dr1 = (grad * x).sum_to_size(r1.shape)
    dr2 = (grad * _rotate(x, rotary_mode)).sum_to_size(r2.shape)
    return dx.to(x.dtype), dr1.to(r1.dtype), dr2.to(r2.dtype)


def _rotary_mul_backward_fake(grad: torch.Tensor, x: torch.Tensor, r1: torch.Tensor, r2: torch.Tensor,
                              rotary_mode: str = "half") -> tuple:
    return x.new_empty(x.shape), r1.new_empty(r1.shape), r2.new_empty(r2.shape)


def _rotary_setup(ctx: Any, inputs: tuple, output: torch.Tensor) -> None:
    x, r1, r2, mode, rotate = inputs
    ctx.mode, ctx.rotated = mode, rotate is not None
    ctx.save_for_backward(x, r1, r2)


def _rotary_backward(ctx: Any, grad: torch.Tensor) -> tuple:
    if ctx.rotated:
        raise RuntimeError("npu_rotary_mul: no backward with the rotate matrix (as on the chip: the vendor "
                           "documents that passing rotate does not support backpropagation)")
    x, r1, r2 = ctx.saved_tensors
    dx, dr1, dr2 = torch.ops.npu.npu_rotary_mul_backward(grad, x, r1, r2, ctx.mode)
    return dx, dr1, dr2, None, None


def _check_swiglu(op: str, x: torch.Tensor, dim: int) -> int:
    if x.dim() == 0 or not -x.dim() <= dim < x.dim():
        raise VendorOpError(f"{op}: dim={dim} is out of range for an input of shape {tuple(x.shape)}")
    if x.shape[dim] % 2:
        raise VendorOpError(f"{op}: the input's size {x.shape[dim]} along dim={dim} must be even (it splits into "
                         f"the gate a and the value b: silu(a) * b)")
    return dim


def _swiglu(x: torch.Tensor, dim: int = -1) -> torch.Tensor:
    _check_swiglu("npu_swiglu", x, dim)
    ct = compute_dtype(x)
    a, b = x.to(ct).chunk(2, dim=dim)
    return (torch.nn.functional.silu(a) * b).to(x.dtype)


def _swiglu_fake(x: torch.Tensor, dim: int = -1) -> torch.Tensor:
    _check_swiglu("npu_swiglu", x, dim)
    shape = list(x.shape)
    shape[dim] //= 2
    return x.new_empty(shape)


def _swiglu_backward(grad_output: torch.Tensor, x: torch.Tensor, dim: int = -1) -> torch.Tensor:
    _check_swiglu("npu_swiglu_backward", x, dim)
    ct = compute_dtype(x)
    a, b = x.to(ct).chunk(2, dim=dim)
    g = grad_output.to(ct)
    sig = torch.sigmoid(a)
    da = g * b * sig * (1 + a * (1 - sig))
    return torch.cat((da, g * a * sig), dim=dim).to(x.dtype)


def _swiglu_backward_fake(grad_output: torch.Tensor, x: torch.Tensor, dim: int = -1) -> torch.Tensor:
    return x.new_empty(x.shape)


def _swiglu_setup(ctx: Any, inputs: tuple, output: torch.Tensor) -> None:
    ctx.dim = inputs[1]
    ctx.save_for_backward(inputs[0])


def _swiglu_autograd(ctx: Any, grad: torch.Tensor) -> tuple:
    (x,) = ctx.saved_tensors
    return torch.ops.npu.npu_swiglu_backward(grad, x, ctx.dim), None


def _softmax_mask(op: str, x: torch.Tensor, mask: torch.Tensor, fixed_triu_mask: bool) -> torch.Tensor:
    if x.dim() < 2:
        raise VendorOpError(f"{op}: x must have at least 2 dimensions, got shape {tuple(x.shape)}")
    if fixed_triu_mask:  # the upper triangle masked, the mask given left aside (the vendor's reference)
        return torch.ones(x.shape[-2:], dtype=torch.bool, device=x.device).triu(1)
    try:
        torch.broadcast_shapes(mask.shape, x.shape)
    except RuntimeError:
        raise VendorOpError(f"{op}: mask of shape {tuple(mask.shape)} does not broadcast to x's "
                         f"{tuple(x.shape)}") from None
    return mask if mask.dtype == torch.bool else mask != 0


def _scaled_masked_softmax(x: torch.Tensor, mask: torch.Tensor, scale: float = 1.0,
                           fixed_triu_mask: bool = False) -> torch.Tensor:
    masked = _softmax_mask("npu_scaled_masked_softmax", x, mask, fixed_triu_mask)
    ct = compute_dtype(x)
    return torch.softmax((x.to(ct) * scale).masked_fill(masked, -10000.0), dim=-1).to(x.dtype)


def _scaled_masked_softmax_fake(x: torch.Tensor, mask: torch.Tensor, scale: float = 1.0,
                                fixed_triu_mask: bool = False) -> torch.Tensor:
    if not fixed_triu_mask:
        _softmax_mask("npu_scaled_masked_softmax", x, mask, False)
    return x.new_empty(x.shape)


def _scaled_masked_softmax_backward(y_grad: torch.Tensor, y: torch.Tensor, mask: torch.Tensor, scale: float,
                                    fixed_triu_mask: bool) -> torch.Tensor:
    masked = _softmax_mask("npu_scaled_masked_softmax_backward", y, mask, fixed_triu_mask)
    ct = compute_dtype(y)
    yc, gc = y.to(ct), y_grad.to(ct)
    dx = yc * (gc - (gc * yc).sum(-1, keepdim=True)) * scale
    return dx.masked_fill(masked, 0.0).to(y.dtype)


def _scaled_masked_softmax_backward_fake(y_grad: torch.Tensor, y: torch.Tensor, mask: torch.Tensor, scale: float,
                                         fixed_triu_mask: bool) -> torch.Tensor:
    return y.new_empty(y.shape)


def _sms_setup(ctx: Any, inputs: tuple, output: torch.Tensor) -> None:
    _, mask, scale, fixed = inputs
    ctx.scale, ctx.fixed = scale, fixed
    ctx.save_for_backward(output, mask)


def _sms_backward(ctx: Any, grad: torch.Tensor) -> tuple:
    y, mask = ctx.saved_tensors
    return torch.ops.npu.npu_scaled_masked_softmax_backward(grad, y, mask, ctx.scale, ctx.fixed), None, None, None


def _check_perm(op: str, perm: list[int], rank: int) -> None:
    if sorted(int(p) % max(rank, 1) for p in perm) != list(range(rank)) or len(perm) != rank:
        raise VendorOpError(f"{op}: perm {list(perm)} is not a permutation of the {rank} dimensions it applies to")


def _confusion_transpose(x: torch.Tensor, perm: list[int], shape: list[int], transpose_first: bool) -> torch.Tensor:
    """transpose_first: x.permute(perm).reshape(shape); else x.reshape(shape).permute(perm)."""
    op = "npu_confusion_transpose"
    if math.prod(shape) != x.numel():
        raise VendorOpError(f"{op}: shape {list(shape)} does not hold the input's {x.numel()} elements "
                         f"(shape {tuple(x.shape)})")
    if transpose_first:
        _check_perm(op, perm, x.dim())
        return x.permute(perm).reshape(shape).contiguous()
    _check_perm(op, perm, len(shape))
    return x.reshape(shape).permute(perm).contiguous()


def _confusion_transpose_fake(x: torch.Tensor, perm: list[int], shape: list[int],
                              transpose_first: bool) -> torch.Tensor:
    op = "npu_confusion_transpose"
    if math.prod(shape) != x.numel():
        raise VendorOpError(f"{op}: shape {list(shape)} does not hold the input's {x.numel()} elements")
    if transpose_first:
        _check_perm(op, perm, x.dim())
        return x.new_empty(shape)
    _check_perm(op, perm, len(shape))
    return x.new_empty([shape[p] for p in perm])


def _confusion_transpose_backward(grad: torch.Tensor, perm: list[int], shape: list[int],
                                  transpose_first: bool) -> torch.Tensor:
    """`shape` is the forward input's shape."""
    inverse = [0] * len(perm)
    for i, p in enumerate(perm):
        inverse[p] = i
    if transpose_first:
        return grad.reshape([shape[p] for p in perm]).permute(inverse).contiguous()
    return grad.permute(inverse).reshape(shape).contiguous()


def _confusion_transpose_backward_fake(grad: torch.Tensor, perm: list[int], shape: list[int],
                                       transpose_first: bool) -> torch.Tensor:
    return grad.new_empty(shape)


def _ct_setup(ctx: Any, inputs: tuple, output: torch.Tensor) -> None:
    x, perm, _, first = inputs
    ctx.perm, ctx.shape, ctx.first = list(perm), list(x.shape), first


def _ct_backward(ctx: Any, grad: torch.Tensor) -> tuple:
    return torch.ops.npu.npu_confusion_transpose_backward(grad, ctx.perm, ctx.shape, ctx.first), None, None, None


def _gelu(x: torch.Tensor, *, approximate: str = "none") -> torch.Tensor:
    choice("npu_gelu", "approximate", approximate, GELU_APPROXIMATIONS)
    return torch.nn.functional.gelu(x, approximate=approximate)


def _gelu_fake(x: torch.Tensor, *, approximate: str = "none") -> torch.Tensor:
    choice("npu_gelu", "approximate", approximate, GELU_APPROXIMATIONS)
    return x.new_empty(x.shape)


def _gelu_backward(grad_output: torch.Tensor, x: torch.Tensor, *, approximate: str = "none") -> torch.Tensor:
    choice("npu_gelu_backward", "approximate", approximate, GELU_APPROXIMATIONS)
    return torch.ops.aten.gelu_backward(grad_output, x, approximate=approximate)


def _gelu_backward_fake(grad_output: torch.Tensor, x: torch.Tensor, *, approximate: str = "none") -> torch.Tensor:
    return x.new_empty(x.shape)


def _gelu_setup(ctx: Any, inputs: tuple, keyword_only_inputs: dict, output: torch.Tensor) -> None:
    ctx.save_for_backward(inputs[0])
    ctx.approximate = keyword_only_inputs.get("approximate", "none")


def _gelu_autograd(ctx: Any, grad: torch.Tensor) -> tuple:
    (x,) = ctx.saved_tensors
    return (torch.ops.npu.npu_gelu_backward(grad, x, approximate=ctx.approximate),)


_FAST_GELU = 1.702  # the vendor's fast_gelu(x) = x / (1 + exp(-1.702 x)) (Atlas A2/A3)


def _fast_gelu(x: torch.Tensor) -> torch.Tensor:
    ct = compute_dtype(x)
    xc = x.to(ct)
    return (xc * torch.sigmoid(_FAST_GELU * xc)).to(x.dtype)


def _fast_gelu_fake(x: torch.Tensor) -> torch.Tensor:
    return x.new_empty(x.shape)


def _fast_gelu_backward(grad: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    ct = compute_dtype(x)
    xc = x.to(ct)
    s = torch.sigmoid(_FAST_GELU * xc)
    return (grad.to(ct) * (s + _FAST_GELU * xc * s * (1 - s))).to(x.dtype)


def _fast_gelu_backward_fake(grad: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    return x.new_empty(x.shape)


def _save_x(ctx: Any, inputs: tuple, output: torch.Tensor) -> None:
    ctx.save_for_backward(inputs[0])


def _fast_gelu_autograd(ctx: Any, grad: torch.Tensor) -> torch.Tensor:
    (x,) = ctx.saved_tensors
    return torch.ops.npu.npu_fast_gelu_backward(grad, x)


# --- optimizer and formats --------------------------------------------------------------------------------
def _apply_adam_w_out(beta1_power: float, beta2_power: float, lr: float, weight_decay: float, beta1: float,
                      beta2: float, epsilon: float, grad: torch.Tensor, max_grad_norm: torch.Tensor | None,
                      amsgrad: bool | None, maximize: bool | None, *, var: torch.Tensor, m: torch.Tensor,
                      v: torch.Tensor) -> tuple:
    """One AdamW step in place (the vendor's ApplyAdamW): beta1_power/beta2_power are beta**(step-1), the
    kernel multiplies them by beta1/beta2 itself; with amsgrad, max_grad_norm holds the running max of v."""
    for name, t in (("var", var), ("m", m), ("v", v)):
        if tuple(t.shape) != tuple(grad.shape):
            raise VendorOpError(f"npu_apply_adam_w: {name} of shape {tuple(t.shape)} is not shaped as grad "
                             f"{tuple(grad.shape)}")
    g = -grad if maximize else grad
    m.mul_(beta1).add_(g, alpha=1 - beta1)
    v.mul_(beta2).addcmul_(g, g, value=1 - beta2)
    var.mul_(1 - lr * weight_decay)
    b1, b2 = beta1_power * beta1, beta2_power * beta2
    second = torch.maximum(max_grad_norm, v) if amsgrad and max_grad_norm is not None else v
    denom = (second / (1 - b2)).sqrt().add_(epsilon)
    var.addcdiv_(m, denom, value=-lr / (1 - b1))
    return var, m, v


def _apply_adam_w_out_fake(*args: Any, var: torch.Tensor, m: torch.Tensor, v: torch.Tensor) -> tuple:
    return var, m, v


def _format_cast(x: torch.Tensor, acl_format: int, *, customize_dtype: int | None = None,
                 input_dtype: int | None = None) -> torch.Tensor:
    if int(acl_format) not in Format._value2member_map_:
        raise VendorOpError(f"npu_format_cast: {acl_format} is not a torch_npu.Format value "
                         f"({', '.join(f'{f.name}={f.value}' for f in Format)})")
    return x.clone()


def _format_cast_fake(x: torch.Tensor, acl_format: int, *, customize_dtype: int | None = None,
                      input_dtype: int | None = None) -> torch.Tensor:
    return x.new_empty(x.shape)


def _format_cast_backward(ctx: Any, grad: torch.Tensor) -> tuple:
    return grad, None


def _no_setup(ctx: Any, inputs: tuple, keyword_only_inputs: dict, output: Any) -> None:
    pass


def _get_npu_format(x: torch.Tensor) -> int:
    return base_format(x)




OPS: tuple[FusedOp, ...] = (
    FusedOp("npu_rms_norm(Tensor self, Tensor gamma, float epsilon=1e-06) -> (Tensor, Tensor)",
        _rms_norm, _rms_norm_fake, _rms_backward, _rms_setup),
    FusedOp("npu_rms_norm_backward(Tensor dy, Tensor self, Tensor gamma, Tensor rstd) -> (Tensor, Tensor)",
        _rms_norm_backward, _rms_norm_backward_fake),
    FusedOp("npu_add_rms_norm(Tensor x1, Tensor x2, Tensor gamma, float epsilon=1e-06) -> (Tensor, Tensor, Tensor)",
        _add_rms_norm, _add_rms_norm_fake, _add_rms_backward, _add_rms_setup),
    FusedOp("npu_rotary_mul(Tensor self, Tensor r1, Tensor r2, str rotary_mode='half', Tensor? rotate=None) -> Tensor",
        _rotary_mul, _rotary_mul_fake, _rotary_backward, _rotary_setup),
    FusedOp("npu_rotary_mul_backward(Tensor grad, Tensor self, Tensor r1, Tensor r2, str rotary_mode='half') "
        "-> (Tensor, Tensor, Tensor)", _rotary_mul_backward, _rotary_mul_backward_fake),
    FusedOp("npu_swiglu(Tensor self, int dim=-1) -> Tensor", _swiglu, _swiglu_fake, _swiglu_autograd, _swiglu_setup),
    FusedOp("npu_swiglu_backward(Tensor grad_output, Tensor self, int dim=-1) -> Tensor",
        _swiglu_backward, _swiglu_backward_fake),
    FusedOp("npu_scaled_masked_softmax(Tensor x, Tensor mask, Scalar scale=1, bool fixed_triu_mask=False) -> Tensor",
        _scaled_masked_softmax, _scaled_masked_softmax_fake, _sms_backward, _sms_setup),
    FusedOp("npu_scaled_masked_softmax_backward(Tensor y_grad, Tensor y, Tensor mask, Scalar scale, "
        "bool fixed_triu_mask) -> Tensor", _scaled_masked_softmax_backward, _scaled_masked_softmax_backward_fake),
    FusedOp("npu_confusion_transpose(Tensor self, int[] perm, int[] shape, bool transpose_first) -> Tensor",
        _confusion_transpose, _confusion_transpose_fake, _ct_backward, _ct_setup),
    FusedOp("npu_confusion_transpose_backward(Tensor grad, int[] perm, SymInt[] shape, bool transpose_first) -> Tensor",
        _confusion_transpose_backward, _confusion_transpose_backward_fake),
    FusedOp("npu_gelu(Tensor self, *, str approximate='none') -> Tensor", _gelu, _gelu_fake, _gelu_autograd,
        _gelu_setup),
    FusedOp("npu_gelu_backward(Tensor grad_output, Tensor self, *, str approximate='none') -> Tensor",
        _gelu_backward, _gelu_backward_fake),
    FusedOp("npu_fast_gelu(Tensor self) -> Tensor", _fast_gelu, _fast_gelu_fake, _fast_gelu_autograd, _save_x),
    FusedOp("fast_gelu(Tensor self) -> Tensor", _fast_gelu, _fast_gelu_fake, _fast_gelu_autograd, _save_x),
    FusedOp("npu_fast_gelu_backward(Tensor grad, Tensor self) -> Tensor", _fast_gelu_backward, _fast_gelu_backward_fake),
    FusedOp("npu_apply_adam_w.out(Scalar beta1_power, Scalar beta2_power, Scalar lr, Scalar weight_decay, "
        "Scalar beta1, Scalar beta2, Scalar epsilon, Tensor grad, Tensor? max_grad_norm, bool? amsgrad, "
        "bool? maximize, *, Tensor(a!) var, Tensor(b!) m, Tensor(c!) v) -> (Tensor(a!), Tensor(b!), Tensor(c!))",
        _apply_adam_w_out, _apply_adam_w_out_fake),
    FusedOp("npu_format_cast(Tensor self, int acl_format, *, int? customize_dtype=None, int? input_dtype=None) -> Tensor",
        _format_cast, _format_cast_fake, _format_cast_backward, _no_setup),
    FusedOp("get_npu_format(Tensor self) -> int", _get_npu_format, _get_npu_format),
)
