"""The vendor's fused ops of an emulated Ascend chip (``torch_npu.npu_*``), computed by reference math.

Code written for Ascend calls torch_npu's fused kernels directly. Under ``FL_DEVICE=emu:npu`` there is no
torch_npu, so this module defines the ones public code calls most as custom ops in the vendor's namespace
(``torch.ops.npu.npu_rms_norm``), with the vendor's schemas (argument names, order, defaults, returned
tuples, taken from Ascend/op-plugin ``op_plugin/config/op_plugin_functions.yaml`` and Ascend/pytorch
``torch_npu/csrc/aten/npu_native_functions.yaml``), and computes each one in plain aten ops following the
vendor's documentation (Ascend/op-plugin ``docs/zh/custom_APIs/torch_npu/*.md``):

- a ``CompositeExplicitAutograd`` kernel (any device: on plain CPU tensors it is the reference math);
- a fake (meta) kernel (``torch.library.register_fake``), so FakeTensor tracing, ``torch.compile`` and
  coverage see the op itself, as on the chip;
- the vendor's own backward ops (``npu_fusion_attention_grad``, ``npu_rms_norm_backward``,
  ``npu_rotary_mul_backward``, ``npu_swiglu_backward``, ...) as ops too, with explicit formulas, wired as
  the forward op's autograd (``torch.library.register_autograd``), so a backward pass records the same
  op pair as on the chip;
- on the emulated device, a handler in the EmuTensor's dispatch table (``tensor.SPECIAL``) that runs the
  reference math on the device tensors themselves: every aten op it uses is checked against the chip's
  route table, and the call is counted under route ``kernel`` (``kernel_route``).

Nothing is registered at import: ``register()`` (idempotent) defines the ops, and refuses when the real
torch_npu is importable (its ops own the ``npu`` namespace then). ``attach(module)`` puts the Python
functions (``FUSED_OPS``) and ``Format`` on an emulated ``torch_npu`` module.

Which ops, by calls in public code (``git grep`` of ``.NAME(`` in *.py of each snapshot, 2026):

==============================  =====================================================================
op                              evidence (repo:path)
==============================  =====================================================================
npu_fusion_attention            MindSpeed 32 calls (mindspeed/core/context_parallel/dot_product_attention.py,
                                ring_context_parallel/ring_context_parallel.py); huggingface/transformers
                                src/transformers/integrations/npu_flash_attention.py (BSND, TND, sparse_mode
                                2/3 with the 2048x2048 triu mask); microsoft/DeepSpeed op_builder/npu/inference.py;
                                vllm-project/vllm-ascend vllm_ascend/attention/attention_v1.py (TND);
                                Ascend/ModelZoo-PyTorch PyTorch/built-in/diffusion/.../attention_processor.py
npu_fusion_attention_grad       MindSpeed 10 calls (ring_context_parallel.py: SBH/TND with softmax_max/sum)
npu_rms_norm                    vllm-ascend 20 (vllm_ascend/_310p/ops/fla/l2norm.py); MindSpeed
                                mindspeed/core/fusions/fused_rms_norm.py; hiyouga/LLaMA-Factory
                                src/llamafactory/v1/plugins/model_plugins/kernels/ops/rms_norm/npu_rms_norm.py;
                                volcengine/verl verl/models/transformers/npu_patch.py
npu_add_rms_norm                vllm-ascend 8 (tests/ut/test_batch_invariant.py); MindSpeed 2
npu_rotary_mul                  vllm-ascend 7 (vllm_ascend/ops/qwen2_decoder.py); LLaMA-Factory 4
                                (.../kernels/ops/rope/npu_rope.py); verl npu_patch.py; DeepSpeed
                                op_builder/npu/inference.py
npu_swiglu                      vllm-ascend 11; LLaMA-Factory 3 (.../kernels/ops/mlp/npu_swiglu.py); verl
                                npu_patch.py; MindSpeed mindspeed/core/fusions/fused_bias_swiglu.py
npu_scaled_masked_softmax       ModelZoo 9 (PyTorch/built-in/foundation/ChatGLM-6B/model/modeling_chatglm.py);
                                MindSpeed 5 (mindspeed/core/fusions/fused_softmax.py, fixed_triu_mask=True)
npu_confusion_transpose         ModelZoo 54 (PyTorch/built-in/cv/classification/SimMIM_for_PyTorch/models/
                                swin_transformer.py, DINO_ID3436_for_PyTorch/vision_transformer.py)
fast_gelu / npu_fast_gelu       ModelZoo 20 (same two files); vllm-ascend vllm_ascend/ops/activation.py
npu_gelu                        documented (approximate='none'|'tanh'); rare in public code
npu_apply_adam_w (out=)         DeepSpeed op_builder/npu/fused_adam.py; MindSpeed
                                mindspeed/core/memory/compress/compress_optimizer.py
npu_format_cast, get_npu_format ModelZoo 201 (Arcface_for_PyTorch/backbones/iresnet.py, partial_fc.py);
                                vllm-ascend 74 + 3 (vllm_ascend/model_loader/netloader/executor/elastic_load.py)
==============================  =====================================================================

Left out: npu_grouped_matmul and the MoE token permutes (LLaMA-Factory, MindSpeed, verl call them, but
their grouping semantics deserve their own item), the quantized matmuls and inference-only attention of
vllm-ascend, and ``npu_dropout_with_add_softmax`` (3 calls, deprecated by the vendor).

Where the emulation differs from the chip (also in docs/vendor-ops.md): dropout masks come from torch's
CPU generator seeded with the returned ``seed``, not the chip's Philox stream; ``npu_format_cast`` changes
no memory layout (a copy; the format is remembered on the tensor for ``get_npu_format``); for ``TND``,
``softmax_max``/``softmax_sum`` are always token-major ``(T, N, 8)``; ``sparse_mode`` 5..8 (prefix and
varlen split) and ``pse`` with ``TND`` raise ``NotImplementedError``.
"""

from __future__ import annotations

import difflib
import importlib.machinery
import math
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass
from enum import IntEnum
from typing import Any

import torch

from ..._names import RouteKind
from ...errors import VendorOpError
from . import npu_dropout

NAMESPACE = "npu"
KERNEL_SOURCE = ("the vendor's fused kernel (torch_npu), computed by torch-fl's reference math in aten ops "
                 "(routing/emu/npu_ops.py)")
LAYOUTS = ("BSH", "SBH", "BSND", "BNSD", "TND")
ROTARY_MODES = ("half", "interleave")
GELU_APPROXIMATIONS = ("none", "tanh")
_NO_LIMIT = 2147483647


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
def _did_you_mean(value: str, choices: tuple[str, ...]) -> str:
    close = difflib.get_close_matches(str(value).upper(), [c.upper() for c in choices], n=1, cutoff=0.5)
    if not close:
        return ""
    return f"; did you mean '{choices[[c.upper() for c in choices].index(close[0])]}'?"


def _choice(op: str, name: str, value: Any, choices: tuple[str, ...]) -> None:
    if value not in choices:
        raise VendorOpError(f"{op}: {name} '{value}' is not one of {', '.join(choices)}"
                         f"{_did_you_mean(value, choices)}")


def _compute_dtype(*tensors: torch.Tensor | None) -> torch.dtype:
    """The dtype the vendor's kernels accumulate in: float32 (float64 stays float64, for gradcheck)."""
    dtype = torch.float32
    for t in tensors:
        if t is not None and t.dtype == torch.float64:
            dtype = torch.float64
    return dtype


def _base_format(t: torch.Tensor) -> int:
    """The format torch_npu gives a new tensor (InferFormat::GuessBaseFormat): NCDHW for 5-d, NCHW for
    4-d, ND otherwise."""
    return int(Format.NCDHW if t.dim() == 5 else Format.NCHW if t.dim() == 4 else Format.ND)


# --- npu_fusion_attention ---------------------------------------------------------------------------------
@dataclass(frozen=True)
class _Geometry:
    layout: str
    batch: int
    heads: int          # N of query (head_num)
    kv_heads: int       # N of key/value (GQA when smaller)
    sq: int
    skv: int
    head_dim: int       # D of query and key
    value_dim: int      # D of value
    segments: tuple[tuple[int, int, int, int], ...] = ()  # TND: (q_start, q_end, kv_start, kv_end)


def _cumulative(op: str, name: str, lengths: Any, total: int) -> list[int]:
    if lengths is None:
        raise VendorOpError(f"{op}: input_layout 'TND' (varlen) needs {name}, the cumulative sequence lengths "
                         f"(for sequences of 2, 3 and 4 tokens: [2, 5, 9])")
    values = [int(x) for x in (lengths.tolist() if isinstance(lengths, torch.Tensor) else lengths)]
    if not values:
        raise VendorOpError(f"{op}: {name} is empty")
    ends, last = [], 0
    for value in values:
        if value < last:
            if value != 0:
                raise VendorOpError(f"{op}: {name} {values} is not cumulative (non-decreasing, trailing zeros "
                                 f"for batches that take no part)")
            continue  # trailing batches left out ([2, 5, 9, 0, 0])
        ends.append(value)
        last = value
    if last > total:
        raise VendorOpError(f"{op}: {name} ends at {last}, beyond the {total} tokens of the tensor")
    return ends


def _geometry(op: str, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, head_num: int,
              input_layout: str, actual_seq_qlen: Any = None, actual_seq_kvlen: Any = None) -> _Geometry:
    """The shapes of one call, checked as the vendor documents them (clear errors for what it rejects)."""
    _choice(op, "input_layout", input_layout, LAYOUTS)
    rank = 3 if input_layout in ("BSH", "SBH", "TND") else 4
    for name, t in (("query", query), ("key", key), ("value", value)):
        if t.dim() != rank:
            raise VendorOpError(f"{op}: input_layout '{input_layout}' takes {rank}-d tensors, but {name} has shape "
                             f"{tuple(t.shape)}")
    if query.dtype != key.dtype or query.dtype != value.dtype:
        raise VendorOpError(f"{op}: query, key and value must have one dtype (the vendor's kernel requires it), "
                         f"got {query.dtype}, {key.dtype}, {value.dtype}")
    if head_num <= 0:
        raise VendorOpError(f"{op}: head_num must be positive, got {head_num}")
    if input_layout in ("BSH", "SBH"):
        b_axis, s_axis = (0, 1) if input_layout == "BSH" else (1, 0)
        hidden = query.shape[2]
        if hidden % head_num:
            raise VendorOpError(f"{op}: head_num={head_num} does not divide the hidden size {hidden} of query "
                             f"(input_layout '{input_layout}': H = head_num * D)")
        d = hidden // head_num
        if d == 0 or key.shape[2] % d:
            raise VendorOpError(f"{op}: key's hidden size {key.shape[2]} is not a multiple of the head size {d} "
                             f"(query's {hidden} / head_num {head_num})")
        nkv = key.shape[2] // d
        if nkv == 0 or value.shape[2] % nkv:
            raise VendorOpError(f"{op}: value's hidden size {value.shape[2]} does not split into key's {nkv} heads")
        dv = value.shape[2] // nkv
        batch, sq, skv = query.shape[b_axis], query.shape[s_axis], key.shape[s_axis]
        kv_batch, v_seq = key.shape[b_axis], value.shape[s_axis]
        heads = head_num
    else:
        n_axis, s_axis = {"BSND": (2, 1), "BNSD": (1, 2), "TND": (1, 0)}[input_layout]
        heads, nkv = query.shape[n_axis], key.shape[n_axis]
        if heads != head_num:
            raise VendorOpError(f"{op}: head_num={head_num}, but query has {heads} heads (axis N of "
                             f"'{input_layout}', shape {tuple(query.shape)})")
        d, dv = query.shape[-1], value.shape[-1]
        if key.shape[-1] != d:
            raise VendorOpError(f"{op}: query and key must have one head size D, got {d} and {key.shape[-1]}")
        if value.shape[n_axis] != nkv:
            raise VendorOpError(f"{op}: key and value must have one number of heads, got {nkv} and "
                             f"{value.shape[n_axis]}")
        batch = 1 if input_layout == "TND" else query.shape[0]
        kv_batch = 1 if input_layout == "TND" else key.shape[0]
        sq, skv, v_seq = query.shape[s_axis], key.shape[s_axis], value.shape[s_axis]
    if nkv == 0 or heads % nkv:
        raise VendorOpError(f"{op}: query's {heads} heads are not a multiple of key/value's {nkv} heads "
                         f"(grouped-query attention needs Nq / Nkv to be a whole number)")
    if kv_batch != batch:
        raise VendorOpError(f"{op}: query and key must have one batch size, got {batch} and {kv_batch}")
    if v_seq != skv:
        raise VendorOpError(f"{op}: key and value must have one sequence length, got {skv} and {v_seq}")
    segments: tuple[tuple[int, int, int, int], ...] = ()
    if input_layout == "TND":
        q_ends = _cumulative(op, "actual_seq_qlen", actual_seq_qlen, sq)
        kv_ends = _cumulative(op, "actual_seq_kvlen", actual_seq_kvlen, skv)
        if len(q_ends) != len(kv_ends):
            raise VendorOpError(f"{op}: actual_seq_qlen and actual_seq_kvlen name {len(q_ends)} and {len(kv_ends)} "
                             f"sequences; they must name the same batches")
        segments = tuple((q0, q1, k0, k1) for q0, q1, k0, k1 in
                         zip([0, *q_ends[:-1]], q_ends, [0, *kv_ends[:-1]], kv_ends, strict=True))
        batch = len(segments)
    return _Geometry(input_layout, batch, heads, nkv, sq, skv, d, dv, segments)


def _to_bnsd(t: torch.Tensor, layout: str, heads: int) -> torch.Tensor:
    if layout == "BSH":
        return t.unflatten(-1, (heads, -1)).transpose(1, 2)
    if layout == "SBH":
        return t.unflatten(-1, (heads, -1)).permute(1, 2, 0, 3)
    if layout == "BSND":
        return t.transpose(1, 2)
    return t


def _from_bnsd(t: torch.Tensor, layout: str) -> torch.Tensor:
    if layout == "BSH":
        return t.transpose(1, 2).flatten(2).contiguous()
    if layout == "SBH":
        return t.permute(2, 0, 1, 3).flatten(2).contiguous()
    if layout == "BSND":
        return t.transpose(1, 2).contiguous()
    return t.contiguous()


def _check_sparse(op: str, g: _Geometry, atten_mask: torch.Tensor | None, sparse_mode: int,
                  pse: torch.Tensor | None, padding_mask: torch.Tensor | None, keep_prob: float) -> None:
    if padding_mask is not None:
        raise NotImplementedError(f"{op}: padding_mask is not supported (the vendor's kernel does not take it "
                                  f"either); express padding with atten_mask (True = masked out)")
    if not 0.0 < keep_prob <= 1.0:
        raise VendorOpError(f"{op}: keep_prob must be in (0, 1] (the probability to keep), got {keep_prob}")
    if sparse_mode not in range(9):
        raise VendorOpError(f"{op}: sparse_mode must be 0..8, got {sparse_mode}")
    if sparse_mode > 4:
        raise NotImplementedError(f"{op}: sparse_mode={sparse_mode} (prefix / varlen split) is not emulated by "
                                  f"torch-fl; modes 0 (mask as given), 1 (all-mask), 2 (top-left causal), "
                                  f"3 (bottom-right causal) and 4 (band) are")
    if pse is not None and g.layout == "TND":
        raise NotImplementedError(f"{op}: pse with input_layout 'TND' is not emulated by torch-fl")
    if atten_mask is not None and sparse_mode in (0, 1):
        if atten_mask.dim() not in (2, 4):
            raise VendorOpError(f"{op}: atten_mask must be SS, 11SS, B1SS or BNSS (True/1 = masked out), got shape "
                             f"{tuple(atten_mask.shape)}")
        sq = max((s[1] - s[0] for s in g.segments), default=0) if g.layout == "TND" else g.sq
        skv = max((s[3] - s[2] for s in g.segments), default=0) if g.layout == "TND" else g.skv
        tail = tuple(atten_mask.shape[-2:])
        if (g.layout == "TND" and (tail[0] < sq or tail[1] < skv)) or (g.layout != "TND" and tail != (sq, skv)):
            raise VendorOpError(f"{op}: atten_mask of shape {tuple(atten_mask.shape)} does not end in (Sq, Skv) = "
                             f"({sq}, {skv}); with sparse_mode {sparse_mode} the mask is taken as given (the "
                             f"compressed 2048x2048 causal mask goes with sparse_mode 2, 3 or 4)")
        if atten_mask.dim() == 4 and g.layout != "TND":
            lead = tuple(atten_mask.shape[:2])
            if lead[0] not in (1, g.batch) or lead[1] not in (1, g.heads):
                raise VendorOpError(f"{op}: atten_mask of shape {tuple(atten_mask.shape)} is none of SS, 11SS, B1SS, "
                                 f"BNSS for B={g.batch}, N={g.heads}")


def _masked(atten_mask: torch.Tensor | None, sparse_mode: int, pre_tockens: int, next_tockens: int, sq: int,
            skv: int, device: torch.device, varlen: bool) -> torch.Tensor | None:
    """True where a score is masked out, broadcastable to (B, N, Sq, Skv); None: nothing is masked.
    The vendor: without atten_mask, sparse_mode and the token limits have no effect (full attention)."""
    if atten_mask is None:
        return None
    if sparse_mode in (0, 1):
        given = atten_mask[..., :sq, :skv] if varlen else atten_mask
        given = given if given.dtype == torch.bool else given != 0
        if sparse_mode == 1 or (pre_tockens >= sq and next_tockens >= skv):
            return given
    row = torch.arange(sq, device=device).unsqueeze(1)
    col = torch.arange(skv, device=device)
    if sparse_mode == 0:  # the band of the token limits, from the top-left corner, with the mask given
        offset = col - row
        return given | (offset > next_tockens) | (offset < -pre_tockens)
    if sparse_mode == 2:  # leftUpCausal
        return col > row
    offset = col - row - (skv - sq)  # bottom-right origin
    if sparse_mode == 3:  # rightDownCausal
        return offset > 0
    return (offset > next_tockens) | (offset < -pre_tockens)  # 4: band, bottom-right origin


class _Dropout:
    """The keep masks of one call, in the order the blocks consume them: one counter-based mask at (seed, offset)
    (npu_dropout.py: the backward op regenerates exactly the forward's mask from the two numbers, as the chip
    does), or the bit-packed `mask` given (``dropout_mask=``, as ``_npu_dropout_gen_mask`` returns it)."""

    def __init__(self, keep_prob: float, seed: int, offset: int, mask: torch.Tensor | None = None) -> None:
        self.keep_prob = keep_prob
        self.seed, self.offset, self.mask = seed, offset, mask
        self.cursor = 0

    def next(self, shape: tuple[int, ...], device: torch.device) -> torch.Tensor | None:
        if self.keep_prob >= 1.0:
            return None
        n = math.prod(shape)
        if self.mask is not None:
            bits = npu_dropout.unpack(self.mask, self.cursor + n)[self.cursor:]
        else:
            bits = npu_dropout.keep(self.seed, self.offset + self.cursor, n, 1.0 - self.keep_prob)
        self.cursor += n
        return bits.reshape(shape).to(device)


def _device_generator(t: torch.Tensor) -> torch.Generator | None:
    """The default generator of the (emulated) device `t` is on; None (the host's) for a host tensor."""
    from . import rng
    from .slot import backend_name

    if t.device.type != backend_name():
        return None
    return rng.default_generator(t.device.index or 0)


def _scores(q: torch.Tensor, k: torch.Tensor, masked: torch.Tensor | None, pse: torch.Tensor | None,
            scale: float, ct: torch.dtype) -> torch.Tensor:
    s = torch.matmul(q.to(ct), k.to(ct).transpose(-1, -2))
    if pse is not None:
        s = s + pse.to(ct)
    s = s * scale  # the vendor: scale * (pse + Q K^T)
    return s if masked is None else s.masked_fill(masked, float("-inf"))


def _probabilities(s: torch.Tensor, softmax_max: torch.Tensor | None = None,
                   softmax_sum: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Softmax of the last axis with its max and sum; a fully masked row gives zeros (no NaN)."""
    if softmax_max is None or softmax_sum is None:
        m = s.amax(-1, keepdim=True)
        m = m.masked_fill(m == float("-inf"), 0.0)
        e = torch.exp(s - m)
        total = e.sum(-1, keepdim=True)
    else:
        m, total = softmax_max.to(s.dtype), softmax_sum.to(s.dtype)
        e = torch.exp(s - m)
    return e / total.masked_fill(total == 0, 1.0), m, total


def _expand_kv(t: torch.Tensor, heads: int) -> torch.Tensor:
    group = heads // t.shape[1]
    return t if group == 1 else t.repeat_interleave(group, dim=1)


def _fold_kv(t: torch.Tensor, kv_heads: int) -> torch.Tensor:
    b, n, s, d = t.shape
    return t if n == kv_heads else t.reshape(b, kv_heads, n // kv_heads, s, d).sum(2)


def _blocks(g: _Geometry, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
            *more: torch.Tensor | None) -> list[tuple]:
    """(q, k, v, *more) per attention block in (B, N, S, D): the whole batch, or one block per TND
    sequence; `more` are query-shaped tensors (dy, attention_in) sliced like query."""
    if g.layout != "TND":
        return [(_to_bnsd(query, g.layout, g.heads), _to_bnsd(key, g.layout, g.kv_heads),
                 _to_bnsd(value, g.layout, g.kv_heads),
                 *(None if t is None else _to_bnsd(t, g.layout, g.heads) for t in more))]
    blocks = []
    for q0, q1, k0, k1 in g.segments:
        def seq(t: torch.Tensor | None, a: int, b: int) -> torch.Tensor | None:
            return None if t is None else t[a:b].transpose(0, 1).unsqueeze(0)
        blocks.append((seq(query, q0, q1), seq(key, k0, k1), seq(value, k0, k1), *(seq(t, q0, q1) for t in more)))
    return blocks


def _assemble(parts: list[torch.Tensor], total: int, used: int, heads: int, width: int,
              template: torch.Tensor) -> torch.Tensor:
    """Per-sequence (1, N, s, width) results of a TND call back into (T, N, width); tokens after the last
    sequence (`used`) are 0."""
    rows = [p[0].transpose(0, 1) for p in parts]
    if used < total or not rows:
        rows.append(template.new_zeros((total - used, heads, width)))
    return torch.cat(rows, 0).contiguous()


def _fusion_attention(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, head_num: int,
                      input_layout: str, pse: torch.Tensor | None = None, padding_mask: torch.Tensor | None = None,
                      atten_mask: torch.Tensor | None = None, scale: float = 1.0, keep_prob: float = 1.0,
                      pre_tockens: int = _NO_LIMIT, next_tockens: int = _NO_LIMIT, inner_precise: int = 0,
                      prefix: list[int] | None = None, actual_seq_qlen: list[int] | None = None,
                      actual_seq_kvlen: list[int] | None = None, sparse_mode: int = 0,
                      gen_mask_parallel: bool = True, sync: bool = False, softmax_layout: str = "",
                      sink: torch.Tensor | None = None, dropout_mask: torch.Tensor | None = None, seed: int = 0,
                      offset: int = 0) -> tuple:
    op = "npu_fusion_attention"
    g = _geometry(op, query, key, value, head_num, input_layout, actual_seq_qlen, actual_seq_kvlen)
    _check_sparse(op, g, atten_mask, sparse_mode, pse, padding_mask, keep_prob)
    _check_newer(op, sink)
    ct = _compute_dtype(query)
    # the vendor: seed 0 takes the seed and offset of the device's generator, another is used as given (with
    # offset) to generate the mask; a dropout_mask given is the mask
    if keep_prob < 1.0 and seed == 0 and dropout_mask is None:
        seed, offset = npu_dropout.draw(_device_generator(query))
    elif keep_prob >= 1.0:
        seed, offset = 0, 0
    dropout = _Dropout(keep_prob, seed, offset, dropout_mask)
    outs, maxes, sums, numels = [], [], [], 0
    for q, k, v in _blocks(g, query, key, value):
        sq, skv = q.shape[2], k.shape[2]
        masked = _masked(atten_mask, sparse_mode, pre_tockens, next_tockens, sq, skv, query.device,
                         g.layout == "TND")
        p, m, total = _probabilities(_scores(q, _expand_kv(k, g.heads), masked, pse, scale, ct))
        keep = dropout.next(tuple(p.shape), query.device)
        if keep is not None:
            numels += p.numel()
            p = p.masked_fill(~keep, 0.0) / keep_prob
        outs.append(torch.matmul(p, _expand_kv(v, g.heads).to(ct)).to(query.dtype))
        maxes.append(m.expand(*m.shape[:-1], 8))
        sums.append(total.expand(*total.shape[:-1], 8))
    if g.layout == "TND":
        used = g.segments[-1][1] if g.segments else 0
        stats = query.new_empty((0,), dtype=torch.float32 if ct == torch.float32 else ct)
        out = _assemble(outs, query.shape[0], used, g.heads, g.value_dim, query)
        softmax_max = _assemble(maxes, query.shape[0], used, g.heads, 8, stats)
        softmax_sum = _assemble(sums, query.shape[0], used, g.heads, 8, stats)
    else:
        out = _from_bnsd(outs[0], g.layout)
        softmax_max, softmax_sum = maxes[0].contiguous(), sums[0].contiguous()
    softmax_out = query.new_empty((0,))
    return out, softmax_max, softmax_sum, softmax_out, seed, offset, numels


def _check_newer(op: str, sink: torch.Tensor | None) -> None:
    """The arguments torch_npu 7.3 added, where the emulated kernel cannot honour them: refused, not ignored."""
    if sink is not None:
        raise NotImplementedError(f"{op}: sink (a per-head attention sink bias, torch_npu 7.3) is not emulated by "
                                  f"torch-fl; call it without sink on the emulated chip, or on the real NPU")


def _fusion_attention_fake(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, head_num: int,
                           input_layout: str, pse: torch.Tensor | None = None,
                           padding_mask: torch.Tensor | None = None, atten_mask: torch.Tensor | None = None,
                           scale: float = 1.0, keep_prob: float = 1.0, pre_tockens: int = _NO_LIMIT,
                           next_tockens: int = _NO_LIMIT, inner_precise: int = 0, prefix: list[int] | None = None,
                           actual_seq_qlen: list[int] | None = None, actual_seq_kvlen: list[int] | None = None,
                           sparse_mode: int = 0, gen_mask_parallel: bool = True, sync: bool = False,
                           softmax_layout: str = "", sink: torch.Tensor | None = None,
                           dropout_mask: torch.Tensor | None = None, seed: int = 0, offset: int = 0) -> tuple:
    op = "npu_fusion_attention"
    g = _geometry(op, query, key, value, head_num, input_layout, actual_seq_qlen, actual_seq_kvlen)
    _check_sparse(op, g, atten_mask, sparse_mode, pse, padding_mask, keep_prob)
    _check_newer(op, sink)
    stats = torch.float64 if query.dtype == torch.float64 else torch.float32
    if g.layout == "TND":
        shape: tuple[int, ...] = (query.shape[0], g.heads, g.value_dim)
        softmax = (query.shape[0], g.heads, 8)
        numels = sum(g.heads * (s[1] - s[0]) * (s[3] - s[2]) for s in g.segments)
    else:
        out_bnsd = (g.batch, g.heads, g.sq, g.value_dim)
        shape = {"BSH": (g.batch, g.sq, g.heads * g.value_dim), "SBH": (g.sq, g.batch, g.heads * g.value_dim),
                 "BSND": (g.batch, g.sq, g.heads, g.value_dim), "BNSD": out_bnsd}[g.layout]
        softmax = (g.batch, g.heads, g.sq, 8)
        numels = g.batch * g.heads * g.sq * g.skv
    return (query.new_empty(shape), query.new_empty(softmax, dtype=stats), query.new_empty(softmax, dtype=stats),
            query.new_empty((0,)), seed if keep_prob < 1.0 else 0, offset if keep_prob < 1.0 else 0,
            numels if keep_prob < 1.0 else 0)


def _softmax_block(t: torch.Tensor | None, g: _Geometry, index: int) -> torch.Tensor | None:
    """Block `index` of softmax_max/softmax_sum ((B, N, Sq, 8), or (T, N, 8) for TND) as (b, n, s, 1)."""
    if t is None:
        return None
    if g.layout != "TND":
        return t[..., :1]
    q0, q1 = g.segments[index][:2]
    return t[q0:q1, :, :1].transpose(0, 1).unsqueeze(0)


def _fusion_attention_grad(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, dy: torch.Tensor,
                           head_num: int, input_layout: str, *, pse: torch.Tensor | None = None,
                           padding_mask: torch.Tensor | None = None, atten_mask: torch.Tensor | None = None,
                           softmax_max: torch.Tensor | None = None, softmax_sum: torch.Tensor | None = None,
                           softmax_in: torch.Tensor | None = None, attention_in: torch.Tensor | None = None,
                           scale_value: float = 1.0, keep_prob: float = 1.0, pre_tockens: int = _NO_LIMIT,
                           next_tockens: int = _NO_LIMIT, inner_precise: int = 0, seed: int = 0, offset: int = 0,
                           numels: int = 0, prefix: list[int] | None = None,
                           actual_seq_qlen: list[int] | None = None, actual_seq_kvlen: list[int] | None = None,
                           sparse_mode: int = 0, gen_mask_parallel: bool = True, sync: bool = False,
                           softmax_layout: str = "", sink: torch.Tensor | None = None,
                           _dropout_mask: torch.Tensor | None = None) -> tuple:
    """dq, dk, dv, dpse, dsink (empty without pse / sink). With softmax_max/softmax_sum (and attention_in) of the forward, the probabilities
    are rebuilt from them, as the chip's kernel does (ring attention merges blocks through them)."""
    op = "npu_fusion_attention_grad"
    g = _geometry(op, query, key, value, head_num, input_layout, actual_seq_qlen, actual_seq_kvlen)
    _check_sparse(op, g, atten_mask, sparse_mode, pse, padding_mask, keep_prob)
    _check_newer(op, sink)
    if tuple(dy.shape) != tuple(_fusion_attention_fake(query, key, value, head_num, input_layout,
                                                       actual_seq_qlen=actual_seq_qlen,
                                                       actual_seq_kvlen=actual_seq_kvlen)[0].shape):
        raise VendorOpError(f"{op}: dy of shape {tuple(dy.shape)} is not shaped as the attention output")
    ct = _compute_dtype(query)
    dropout = _Dropout(keep_prob, seed, offset, _dropout_mask)
    dqs, dks, dvs, dpse = [], [], [], None
    for i, (q, k, v, d_out, o) in enumerate(_blocks(g, query, key, value, dy, attention_in)):
        sq, skv = q.shape[2], k.shape[2]
        masked = _masked(atten_mask, sparse_mode, pre_tockens, next_tockens, sq, skv, query.device,
                         g.layout == "TND")
        ke, ve = _expand_kv(k, g.heads).to(ct), _expand_kv(v, g.heads).to(ct)
        p, _, _ = _probabilities(_scores(q, ke, masked, pse, scale_value, ct),
                                 _softmax_block(softmax_max, g, i), _softmax_block(softmax_sum, g, i))
        keep = dropout.next(tuple(p.shape), query.device)
        d_out = d_out.to(ct)
        dp = torch.matmul(d_out, ve.transpose(-1, -2))
        if keep is not None:
            dp = dp.masked_fill(~keep, 0.0) / keep_prob
            p_drop = p.masked_fill(~keep, 0.0) / keep_prob
        else:
            p_drop = p
        dv = torch.matmul(p_drop.transpose(-1, -2), d_out)
        row = (d_out * o.to(ct)).sum(-1, keepdim=True) if o is not None else (dp * p).sum(-1, keepdim=True)
        ds = p * (dp - row)
        dq = torch.matmul(ds, ke) * scale_value
        dk = torch.matmul(ds.transpose(-1, -2), q.to(ct)) * scale_value
        dqs.append(dq.to(query.dtype))
        dks.append(_fold_kv(dk, g.kv_heads).to(key.dtype))
        dvs.append(_fold_kv(dv, g.kv_heads).to(value.dtype))
        if pse is not None:
            dpse = (ds * scale_value).sum_to_size(pse.shape).to(pse.dtype)
    if g.layout == "TND":
        q_used, kv_used = (g.segments[-1][1], g.segments[-1][3]) if g.segments else (0, 0)
        dq = _assemble(dqs, query.shape[0], q_used, g.heads, g.head_dim, query)
        dk = _assemble(dks, key.shape[0], kv_used, g.kv_heads, g.head_dim, key)
        dv = _assemble(dvs, value.shape[0], kv_used, g.kv_heads, g.value_dim, value)
    else:
        dq, dk, dv = (_from_bnsd(t[0], g.layout) for t in (dqs, dks, dvs))
    return dq, dk, dv, (dpse if dpse is not None else query.new_empty((0,))), query.new_empty((0,))


def _fusion_attention_grad_fake(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, dy: torch.Tensor,
                                head_num: int, input_layout: str, **kwargs: Any) -> tuple:
    _geometry("npu_fusion_attention_grad", query, key, value, head_num, input_layout,
              kwargs.get("actual_seq_qlen"), kwargs.get("actual_seq_kvlen"))
    pse = kwargs.get("pse")
    return (query.new_empty(query.shape), key.new_empty(key.shape), value.new_empty(value.shape),
            pse.new_empty(pse.shape) if pse is not None else query.new_empty((0,)), query.new_empty((0,)))


_FA_ARGS = ("query", "key", "value", "head_num", "input_layout", "pse", "padding_mask", "atten_mask", "scale",
            "keep_prob", "pre_tockens", "next_tockens", "inner_precise", "prefix", "actual_seq_qlen",
            "actual_seq_kvlen", "sparse_mode", "gen_mask_parallel", "sync", "softmax_layout", "sink", "dropout_mask",
            "seed", "offset")


def _fa_setup(ctx: Any, inputs: tuple, output: tuple) -> None:
    args = dict(zip(_FA_ARGS, inputs, strict=True))
    ctx.args = {k: v for k, v in args.items() if not isinstance(v, torch.Tensor)}
    ctx.seed, ctx.offset, ctx.numels = output[4], output[5], output[6]
    ctx.pse_needs_grad = args["pse"] is not None and args["pse"].requires_grad
    ctx.dropout_mask = args["dropout_mask"] if args["keep_prob"] < 1.0 else None
    ctx.save_for_backward(args["query"], args["key"], args["value"], args["pse"], args["atten_mask"],
                          output[0], output[1], output[2])
    ctx.mark_non_differentiable(output[1], output[2], output[3])


def _fa_backward(ctx: Any, grad_out: torch.Tensor, *_: Any) -> tuple:
    q, k, v, pse, mask, out, smax, ssum = ctx.saved_tensors
    a = ctx.args
    kwargs = dict(pse=pse, atten_mask=mask, softmax_max=smax, softmax_sum=ssum, attention_in=out,
                  scale_value=a["scale"], keep_prob=a["keep_prob"], pre_tockens=a["pre_tockens"],
                  next_tockens=a["next_tockens"], inner_precise=a["inner_precise"], seed=ctx.seed, offset=ctx.offset,
                  numels=ctx.numels, prefix=a["prefix"], actual_seq_qlen=a["actual_seq_qlen"],
                  actual_seq_kvlen=a["actual_seq_kvlen"], sparse_mode=a["sparse_mode"],
                  gen_mask_parallel=a["gen_mask_parallel"], sync=a["sync"], softmax_layout=a["softmax_layout"])
    if ctx.dropout_mask is not None:
        # the forward's own mask (the grad op's schema has no dropout_mask: its kernel is given it here)
        dq, dk, dv, dpse, _ = _fusion_attention_grad(q, k, v, grad_out, a["head_num"], a["input_layout"],
                                                     _dropout_mask=ctx.dropout_mask, **kwargs)
    else:
        dq, dk, dv, dpse, _ = torch.ops.npu.npu_fusion_attention_grad(q, k, v, grad_out, a["head_num"],
                                                                      a["input_layout"], **kwargs)
    grads = [dq, dk, dv, dpse if ctx.pse_needs_grad else None]
    return (*grads[:3], None, None, grads[3], *([None] * (len(_FA_ARGS) - 6)))


# --- npu_fusion_attention_v3: actual sequence lengths, seed and offset as tensors --------------------------
def _long(value: int, like: torch.Tensor) -> torch.Tensor:
    return torch.tensor([int(value)], dtype=torch.long).to(like.device)


def _int_of(t: torch.Tensor | None) -> int:
    return 0 if t is None else int(t.reshape(-1)[0].item())


def _fusion_attention_v3(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, head_num: int,
                         input_layout: str, pse: torch.Tensor | None = None, padding_mask: torch.Tensor | None = None,
                         atten_mask: torch.Tensor | None = None, scale: float = 1.0, keep_prob: float = 1.0,
                         pre_tockens: int = _NO_LIMIT, next_tockens: int = _NO_LIMIT, inner_precise: int = 0,
                         prefix: list[int] | None = None, actual_seq_qlen: torch.Tensor | None = None,
                         actual_seq_kvlen: torch.Tensor | None = None, sparse_mode: int = 0,
                         gen_mask_parallel: bool = True, sync: bool = False, softmax_layout: str = "",
                         sink: torch.Tensor | None = None) -> tuple:
    out, smax, ssum, sout, seed, offset, _ = _fusion_attention(
        query, key, value, head_num, input_layout, pse, padding_mask, atten_mask, scale, keep_prob, pre_tockens,
        next_tockens, inner_precise, prefix, _ints(actual_seq_qlen), _ints(actual_seq_kvlen), sparse_mode,
        gen_mask_parallel, sync, softmax_layout, sink)
    return out, smax, ssum, sout, _long(seed, query), _long(offset, query)


def _fusion_attention_v3_fake(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, head_num: int,
                              input_layout: str, *args: Any, **kwargs: Any) -> tuple:
    out, smax, ssum, sout = _fusion_attention_fake(query, key, value, head_num, input_layout)[:4]
    if input_layout == "TND":  # (the fake of v1 takes the lengths as lists; T x N x 8 whatever they are)
        smax = ssum = query.new_empty((query.shape[0], query.shape[1], 8), dtype=torch.float32)
    return (out, smax, ssum, sout, query.new_empty((1,), dtype=torch.long),
            query.new_empty((1,), dtype=torch.long))


def _fusion_attention_grad_v3(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, dy: torch.Tensor,
                              head_num: int, input_layout: str, *, pse: torch.Tensor | None = None,
                              padding_mask: torch.Tensor | None = None, atten_mask: torch.Tensor | None = None,
                              softmax_max: torch.Tensor | None = None, softmax_sum: torch.Tensor | None = None,
                              softmax_in: torch.Tensor | None = None, attention_in: torch.Tensor | None = None,
                              scale_value: float = 1.0, keep_prob: float = 1.0, pre_tockens: int = _NO_LIMIT,
                              next_tockens: int = _NO_LIMIT, inner_precise: int = 0, seed: torch.Tensor | None = None,
                              offset: torch.Tensor | None = None, prefix: list[int] | None = None,
                              actual_seq_qlen: torch.Tensor | None = None,
                              actual_seq_kvlen: torch.Tensor | None = None, sparse_mode: int = 0,
                              gen_mask_parallel: bool = True, sync: bool = False, softmax_layout: str = "",
                              sink: torch.Tensor | None = None) -> tuple:
    return _fusion_attention_grad(
        query, key, value, dy, head_num, input_layout, pse=pse, padding_mask=padding_mask, atten_mask=atten_mask,
        softmax_max=softmax_max, softmax_sum=softmax_sum, softmax_in=softmax_in, attention_in=attention_in,
        scale_value=scale_value, keep_prob=keep_prob, pre_tockens=pre_tockens, next_tockens=next_tockens,
        inner_precise=inner_precise, seed=_int_of(seed), offset=_int_of(offset), prefix=prefix,
        actual_seq_qlen=_ints(actual_seq_qlen), actual_seq_kvlen=_ints(actual_seq_kvlen), sparse_mode=sparse_mode,
        gen_mask_parallel=gen_mask_parallel, sync=sync, softmax_layout=softmax_layout, sink=sink)


def _fusion_attention_grad_v3_fake(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, dy: torch.Tensor,
                                   head_num: int, input_layout: str, **kwargs: Any) -> tuple:
    pse = kwargs.get("pse")
    return (query.new_empty(query.shape), key.new_empty(key.shape), value.new_empty(value.shape),
            pse.new_empty(pse.shape) if pse is not None else query.new_empty((0,)), query.new_empty((0,)))


_FA3_ARGS = _FA_ARGS[:_FA_ARGS.index("dropout_mask")]


def _fa3_setup(ctx: Any, inputs: tuple, output: tuple) -> None:
    args = dict(zip(_FA3_ARGS, inputs, strict=True))
    ctx.args = {k: v for k, v in args.items() if not isinstance(v, torch.Tensor)}
    ctx.pse_needs_grad = args["pse"] is not None and args["pse"].requires_grad
    ctx.save_for_backward(args["query"], args["key"], args["value"], args["pse"], args["atten_mask"],
                          args["actual_seq_qlen"], args["actual_seq_kvlen"], *output[:3], output[4], output[5])
    ctx.mark_non_differentiable(*output[1:])


def _fa3_backward(ctx: Any, grad_out: torch.Tensor, *_: Any) -> tuple:
    q, k, v, pse, mask, qlen, kvlen, out, smax, ssum, seed, offset = ctx.saved_tensors
    a = ctx.args
    dq, dk, dv, dpse, _ = torch.ops.npu.npu_fusion_attention_grad_v3(
        q, k, v, grad_out, a["head_num"], a["input_layout"], pse=pse, atten_mask=mask, softmax_max=smax,
        softmax_sum=ssum, attention_in=out, scale_value=a["scale"], keep_prob=a["keep_prob"],
        pre_tockens=a["pre_tockens"], next_tockens=a["next_tockens"], inner_precise=a["inner_precise"], seed=seed,
        offset=offset, prefix=a["prefix"], actual_seq_qlen=qlen, actual_seq_kvlen=kvlen,
        sparse_mode=a["sparse_mode"], gen_mask_parallel=a["gen_mask_parallel"], sync=a["sync"],
        softmax_layout=a["softmax_layout"])
    grads = [dq, dk, dv, dpse if ctx.pse_needs_grad else None]
    return (*grads[:3], None, None, grads[3], *([None] * (len(_FA3_ARGS) - 6)))


# --- _npu_dropout_gen_mask ----------------------------------------------------------------------------------
def _dropout_gen_mask(x: torch.Tensor, size: list[int], p: float, seed: int, offset: int, *,
                      parallel: bool | None = True, sync: bool | None = None) -> torch.Tensor:
    if not 0.0 <= float(p) <= 1.0:
        raise VendorOpError(f"_npu_dropout_gen_mask: p={p} is not a probability in [0, 1]")
    return npu_dropout.gen_mask(math.prod(size), float(p), int(seed), int(offset)).to(x.device)


def _dropout_gen_mask_fake(x: torch.Tensor, size: list[int], p: float, seed: int, offset: int, *,
                           parallel: bool | None = True, sync: bool | None = None) -> torch.Tensor:
    return x.new_empty((npu_dropout.padded_bytes(math.prod(size)),), dtype=torch.uint8)


# --- norms, rotary, activations ---------------------------------------------------------------------------
def _norm_dims(op: str, x: torch.Tensor, gamma: torch.Tensor) -> tuple[int, ...]:
    if gamma.dim() == 0 or gamma.dim() > x.dim() or tuple(x.shape[x.dim() - gamma.dim():]) != tuple(gamma.shape):
        raise VendorOpError(f"{op}: gamma of shape {tuple(gamma.shape)} must be the trailing dimensions of the "
                         f"input's shape {tuple(x.shape)}")
    return tuple(range(x.dim() - gamma.dim(), x.dim()))


def _rms_norm(x: torch.Tensor, gamma: torch.Tensor, epsilon: float = 1e-6) -> tuple[torch.Tensor, torch.Tensor]:
    dims = _norm_dims("npu_rms_norm", x, gamma)
    ct = _compute_dtype(x, gamma)
    xf = x.to(ct)
    rstd = torch.rsqrt(xf.pow(2).mean(dims, keepdim=True) + epsilon)
    return (xf * rstd * gamma.to(ct)).to(x.dtype), rstd


def _rms_norm_fake(x: torch.Tensor, gamma: torch.Tensor, epsilon: float = 1e-6) -> tuple:
    dims = _norm_dims("npu_rms_norm", x, gamma)
    shape = [1 if i in dims else s for i, s in enumerate(x.shape)]
    return x.new_empty(x.shape), x.new_empty(shape, dtype=_compute_dtype(x, gamma))


def _rms_norm_backward(dy: torch.Tensor, x: torch.Tensor, gamma: torch.Tensor,
                       rstd: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    dims = _norm_dims("npu_rms_norm_backward", x, gamma)
    ct = _compute_dtype(x, gamma)
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
                            f"{_did_you_mean(rotary_mode, ROTARY_MODES)}")
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
    ct = _compute_dtype(x)
    a, b = x.to(ct).chunk(2, dim=dim)
    return (torch.nn.functional.silu(a) * b).to(x.dtype)


def _swiglu_fake(x: torch.Tensor, dim: int = -1) -> torch.Tensor:
    _check_swiglu("npu_swiglu", x, dim)
    shape = list(x.shape)
    shape[dim] //= 2
    return x.new_empty(shape)


def _swiglu_backward(grad_output: torch.Tensor, x: torch.Tensor, dim: int = -1) -> torch.Tensor:
    _check_swiglu("npu_swiglu_backward", x, dim)
    ct = _compute_dtype(x)
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
    ct = _compute_dtype(x)
    return torch.softmax((x.to(ct) * scale).masked_fill(masked, -10000.0), dim=-1).to(x.dtype)


def _scaled_masked_softmax_fake(x: torch.Tensor, mask: torch.Tensor, scale: float = 1.0,
                                fixed_triu_mask: bool = False) -> torch.Tensor:
    if not fixed_triu_mask:
        _softmax_mask("npu_scaled_masked_softmax", x, mask, False)
    return x.new_empty(x.shape)


def _scaled_masked_softmax_backward(y_grad: torch.Tensor, y: torch.Tensor, mask: torch.Tensor, scale: float,
                                    fixed_triu_mask: bool) -> torch.Tensor:
    masked = _softmax_mask("npu_scaled_masked_softmax_backward", y, mask, fixed_triu_mask)
    ct = _compute_dtype(y)
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
    _choice("npu_gelu", "approximate", approximate, GELU_APPROXIMATIONS)
    return torch.nn.functional.gelu(x, approximate=approximate)


def _gelu_fake(x: torch.Tensor, *, approximate: str = "none") -> torch.Tensor:
    _choice("npu_gelu", "approximate", approximate, GELU_APPROXIMATIONS)
    return x.new_empty(x.shape)


def _gelu_backward(grad_output: torch.Tensor, x: torch.Tensor, *, approximate: str = "none") -> torch.Tensor:
    _choice("npu_gelu_backward", "approximate", approximate, GELU_APPROXIMATIONS)
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
    ct = _compute_dtype(x)
    xc = x.to(ct)
    return (xc * torch.sigmoid(_FAST_GELU * xc)).to(x.dtype)


def _fast_gelu_fake(x: torch.Tensor) -> torch.Tensor:
    return x.new_empty(x.shape)


def _fast_gelu_backward(grad: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    ct = _compute_dtype(x)
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
    return _base_format(x)


# --- the ops: schema, kernel, fake, autograd ---------------------------------------------------------------
@dataclass(frozen=True)
class _Op:
    schema: str                       # the vendor's schema, as in op_plugin_functions.yaml
    kernel: Callable[..., Any]        # reference math in aten ops
    fake: Callable[..., Any] | None   # shapes only
    backward: Callable[..., Any] | None = None
    setup: Callable[..., Any] | None = None

    @property
    def name(self) -> str:
        return self.schema.split("(", 1)[0]


_FA_SCHEMA = ("npu_fusion_attention(Tensor query, Tensor key, Tensor value, int head_num, str input_layout, "
              "Tensor? pse=None, Tensor? padding_mask=None, Tensor? atten_mask=None, float scale=1., "
              "float keep_prob=1., int pre_tockens=2147483647, int next_tockens=2147483647, int inner_precise=0, "
              "int[]? prefix=None, int[]? actual_seq_qlen=None, int[]? actual_seq_kvlen=None, int sparse_mode=0, "
              "bool gen_mask_parallel=True, bool sync=False, str softmax_layout=\"\", Tensor? sink=None, "
              "Tensor? dropout_mask=None, int seed=0, int offset=0) -> (Tensor, Tensor, Tensor, Tensor, int, int, int)")
_FA_GRAD_SCHEMA = ("npu_fusion_attention_grad(Tensor query, Tensor key, Tensor value, Tensor dy, int head_num, "
                   "str input_layout, *, Tensor? pse=None, Tensor? padding_mask=None, Tensor? atten_mask=None, "
                   "Tensor? softmax_max=None, Tensor? softmax_sum=None, Tensor? softmax_in=None, "
                   "Tensor? attention_in=None, float scale_value=1., float keep_prob=1., "
                   "int pre_tockens=2147483647, int next_tockens=2147483647, int inner_precise=0, int seed=0, "
                   "int offset=0, int numels=0, int[]? prefix=None, int[]? actual_seq_qlen=None, "
                   "int[]? actual_seq_kvlen=None, int sparse_mode=0, bool gen_mask_parallel=True, bool sync=False, "
                   "str softmax_layout=\"\", Tensor? sink=None) -> (Tensor, Tensor, Tensor, Tensor, Tensor)")

_FA3_SCHEMA = ("npu_fusion_attention_v3(Tensor query, Tensor key, Tensor value, int head_num, str input_layout, "
               "Tensor? pse=None, Tensor? padding_mask=None, Tensor? atten_mask=None, float scale=1., "
               "float keep_prob=1., int pre_tockens=2147483647, int next_tockens=2147483647, int inner_precise=0, "
               "SymInt[]? prefix=None, Tensor? actual_seq_qlen=None, Tensor? actual_seq_kvlen=None, "
               "int sparse_mode=0, bool gen_mask_parallel=True, bool sync=False, str softmax_layout=\"\", "
               "Tensor? sink=None) -> (Tensor, Tensor, Tensor, Tensor, Tensor, Tensor)")
_FA3_GRAD_SCHEMA = ("npu_fusion_attention_grad_v3(Tensor query, Tensor key, Tensor value, Tensor dy, int head_num, "
                    "str input_layout, *, Tensor? pse=None, Tensor? padding_mask=None, Tensor? atten_mask=None, "
                    "Tensor? softmax_max=None, Tensor? softmax_sum=None, Tensor? softmax_in=None, "
                    "Tensor? attention_in=None, float scale_value=1., float keep_prob=1., "
                    "int pre_tockens=2147483647, int next_tockens=2147483647, int inner_precise=0, Tensor? seed=None, "
                    "Tensor? offset=None, SymInt[]? prefix=None, Tensor? actual_seq_qlen=None, "
                    "Tensor? actual_seq_kvlen=None, int sparse_mode=0, bool gen_mask_parallel=True, bool sync=False, "
                    "str softmax_layout=\"\", Tensor? sink=None) -> (Tensor, Tensor, Tensor, Tensor, Tensor)")

OPS: tuple[_Op, ...] = (
    _Op(_FA_SCHEMA, _fusion_attention, _fusion_attention_fake, _fa_backward, _fa_setup),
    _Op(_FA_GRAD_SCHEMA, _fusion_attention_grad, _fusion_attention_grad_fake),
    _Op(_FA3_SCHEMA, _fusion_attention_v3, _fusion_attention_v3_fake, _fa3_backward, _fa3_setup),
    _Op(_FA3_GRAD_SCHEMA, _fusion_attention_grad_v3, _fusion_attention_grad_v3_fake),
    _Op("_npu_dropout_gen_mask.Tensor(Tensor self, int[] size, float p, int seed, int offset, *, bool? parallel=True, "
        "bool? sync=None) -> Tensor", _dropout_gen_mask, _dropout_gen_mask_fake),
    _Op("npu_rms_norm(Tensor self, Tensor gamma, float epsilon=1e-06) -> (Tensor, Tensor)",
        _rms_norm, _rms_norm_fake, _rms_backward, _rms_setup),
    _Op("npu_rms_norm_backward(Tensor dy, Tensor self, Tensor gamma, Tensor rstd) -> (Tensor, Tensor)",
        _rms_norm_backward, _rms_norm_backward_fake),
    _Op("npu_add_rms_norm(Tensor x1, Tensor x2, Tensor gamma, float epsilon=1e-06) -> (Tensor, Tensor, Tensor)",
        _add_rms_norm, _add_rms_norm_fake, _add_rms_backward, _add_rms_setup),
    _Op("npu_rotary_mul(Tensor self, Tensor r1, Tensor r2, str rotary_mode='half', Tensor? rotate=None) -> Tensor",
        _rotary_mul, _rotary_mul_fake, _rotary_backward, _rotary_setup),
    _Op("npu_rotary_mul_backward(Tensor grad, Tensor self, Tensor r1, Tensor r2, str rotary_mode='half') "
        "-> (Tensor, Tensor, Tensor)", _rotary_mul_backward, _rotary_mul_backward_fake),
    _Op("npu_swiglu(Tensor self, int dim=-1) -> Tensor", _swiglu, _swiglu_fake, _swiglu_autograd, _swiglu_setup),
    _Op("npu_swiglu_backward(Tensor grad_output, Tensor self, int dim=-1) -> Tensor",
        _swiglu_backward, _swiglu_backward_fake),
    _Op("npu_scaled_masked_softmax(Tensor x, Tensor mask, Scalar scale=1, bool fixed_triu_mask=False) -> Tensor",
        _scaled_masked_softmax, _scaled_masked_softmax_fake, _sms_backward, _sms_setup),
    _Op("npu_scaled_masked_softmax_backward(Tensor y_grad, Tensor y, Tensor mask, Scalar scale, "
        "bool fixed_triu_mask) -> Tensor", _scaled_masked_softmax_backward, _scaled_masked_softmax_backward_fake),
    _Op("npu_confusion_transpose(Tensor self, int[] perm, int[] shape, bool transpose_first) -> Tensor",
        _confusion_transpose, _confusion_transpose_fake, _ct_backward, _ct_setup),
    _Op("npu_confusion_transpose_backward(Tensor grad, int[] perm, SymInt[] shape, bool transpose_first) -> Tensor",
        _confusion_transpose_backward, _confusion_transpose_backward_fake),
    _Op("npu_gelu(Tensor self, *, str approximate='none') -> Tensor", _gelu, _gelu_fake, _gelu_autograd,
        _gelu_setup),
    _Op("npu_gelu_backward(Tensor grad_output, Tensor self, *, str approximate='none') -> Tensor",
        _gelu_backward, _gelu_backward_fake),
    _Op("npu_fast_gelu(Tensor self) -> Tensor", _fast_gelu, _fast_gelu_fake, _fast_gelu_autograd, _save_x),
    _Op("fast_gelu(Tensor self) -> Tensor", _fast_gelu, _fast_gelu_fake, _fast_gelu_autograd, _save_x),
    _Op("npu_fast_gelu_backward(Tensor grad, Tensor self) -> Tensor", _fast_gelu_backward, _fast_gelu_backward_fake),
    _Op("npu_apply_adam_w.out(Scalar beta1_power, Scalar beta2_power, Scalar lr, Scalar weight_decay, "
        "Scalar beta1, Scalar beta2, Scalar epsilon, Tensor grad, Tensor? max_grad_norm, bool? amsgrad, "
        "bool? maximize, *, Tensor(a!) var, Tensor(b!) m, Tensor(c!) v) -> (Tensor(a!), Tensor(b!), Tensor(c!))",
        _apply_adam_w_out, _apply_adam_w_out_fake),
    _Op("npu_format_cast(Tensor self, int acl_format, *, int? customize_dtype=None, int? input_dtype=None) -> Tensor",
        _format_cast, _format_cast_fake, _format_cast_backward, _no_setup),
    _Op("get_npu_format(Tensor self) -> int", _get_npu_format, _get_npu_format),
)

# canonical op name ('npu::npu_rms_norm.default') -> its reference kernel
KERNELS: dict[str, Callable[..., Any]] = {}
for _op in OPS:
    _base, _, _overload = _op.name.partition(".")
    KERNELS[f"{NAMESPACE}::{_base}.{_overload or 'default'}"] = _op.kernel


def kernel_route(op: str) -> Any:
    """The route of the vendor's fused op `op` ('npu::npu_rms_norm' or 'npu::npu_rms_norm.default') on an
    emulated chip: ``Route('kernel', KERNEL_SOURCE, reference)``; None for any other op."""
    from ..table import Route

    name = op if "." in op.split("::", 1)[-1] else f"{op}.default"
    kernel = KERNELS.get(name)
    return Route(RouteKind.KERNEL, KERNEL_SOURCE, kernel) if kernel is not None else None


# --- registration -------------------------------------------------------------------------------------------
_lock = threading.Lock()
_library: Any = None


def vendor_present() -> bool:
    """Whether the real torch_npu is loaded or installed (its ops own the ``npu`` namespace then). The
    emulated package (plugin.py: marked ``__torch_fl_emulation__``, found by torch-fl's own finder) is not."""
    loaded = sys.modules.get("torch_npu")
    if loaded is not None and not hasattr(loaded, "__torch_fl_emulation__"):
        return True
    return importlib.machinery.PathFinder.find_spec("torch_npu") is not None


def registered() -> bool:
    return _library is not None


def register() -> None:
    """Define the ops in ``torch.ops.npu`` (once per process; later calls return at once). Raises when the
    real torch_npu is present: its own kernels are the ones to call there."""
    global _library
    if _library is not None:
        return
    with _lock:
        if _library is not None:
            return
        if vendor_present():
            raise RuntimeError("torch-fl: the real torch_npu is installed; its fused ops are the chip's own "
                               "(torch_npu.npu_fusion_attention, ...) and torch-fl does not define emulated ones "
                               "next to them")
        lib = torch.library.Library(NAMESPACE, "FRAGMENT")
        for op in OPS:
            lib.define(op.schema)
            qualified = f"{NAMESPACE}::{op.name.split('.', 1)[0]}"
            lib.impl(op.name, op.kernel, "CompositeExplicitAutograd")
            if op.fake is not None:
                torch.library.register_fake(f"{NAMESPACE}::{op.name}", op.fake, lib=lib)
            if op.backward is not None:
                torch.library.register_autograd(qualified, op.backward, setup_context=op.setup, lib=lib)
        _library = lib
        _register_emulated()


def _register_emulated() -> None:
    """On the emulated device: each op runs its reference math on the device tensors (every aten op it
    uses is checked by the chip's route table), counted as the vendor's kernel."""
    from . import tensor

    for op in OPS:
        base, _, overload = op.name.partition(".")
        tensor.SPECIAL[getattr(getattr(torch.ops.npu, base), overload or "default")] = _emulated(op.kernel)


def _emulated(kernel: Callable[..., Any]) -> Callable[[Any, tuple, dict], Any]:
    def run(func: Any, args: tuple, kwargs: dict) -> Any:
        from ..._opnames import canonical_op_name
        from ..router import first_dtype
        from .slot import state

        router = state.router
        if router is None:  # an unchecked emulated device
            return kernel(*args, **kwargs)
        name = canonical_op_name(func)
        dtype = first_dtype(args, kwargs)
        route = state.table.route(name, dtype)
        if route.kind is RouteKind.UNSUPPORTED:  # (a dtype the chip does not have)
            raise router.error(name, args, kwargs, route)
        if route.kind is not RouteKind.KERNEL:  # the table says 'native: not an aten operator': the vendor's kernel
            route = kernel_route(name)
        return router.call(name, func, route, dtype, args, kwargs, native=None)
    return run


# --- the vendor's Python functions (torch_npu.<name>) --------------------------------------------------------
def _lengths(values: Any) -> torch.Tensor | None:
    """A tensor argument of the v3 ops given as a tensor, a sequence or a number: an int64 tensor."""
    if values is None or isinstance(values, torch.Tensor):
        return values
    return torch.tensor(values if isinstance(values, (list, tuple)) else [values], dtype=torch.long)


def _ints(values: Any) -> list[int] | None:
    if values is None:
        return None
    return [int(x) for x in (values.tolist() if isinstance(values, torch.Tensor) else values)]


def npu_fusion_attention(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, head_num: int,
                         input_layout: str, pse: torch.Tensor | None = None, padding_mask: torch.Tensor | None = None,
                         atten_mask: torch.Tensor | None = None, scale: float = 1.0, keep_prob: float = 1.0,
                         pre_tockens: int = _NO_LIMIT, next_tockens: int = _NO_LIMIT, inner_precise: int = 0,
                         prefix: Any = None, actual_seq_qlen: Any = None, actual_seq_kvlen: Any = None,
                         sparse_mode: int = 0, gen_mask_parallel: bool = True, sync: bool = False,
                         softmax_layout: str = "", sink: torch.Tensor | None = None,
                         dropout_mask: torch.Tensor | None = None, seed: int = 0, offset: int = 0) -> tuple:
    """Dropout(Softmax(Mask(scale * (pse + query @ key^T), atten_mask)), keep_prob) @ value.

    atten_mask: True/1 = masked out (SS, 11SS, B1SS, BNSS); sparse_mode 0 takes it as given (with the
    pre/next token band), 1 as given, 2/3 are causal from the top-left/bottom-right corner and 4 a band
    (pre_tockens before, next_tockens after the diagonal from the bottom-right), their mask being the
    compressed 2048x2048 triu; without atten_mask every query sees every key.
    seed/offset: 0 draws a seed; others seed the dropout mask (the backward regenerates it from them).
    sink and a dropout_mask with dropout are refused (not emulated).
    Returns (attention_out, softmax_max, softmax_sum, softmax_out, seed, offset, numels)."""
    register()
    return torch.ops.npu.npu_fusion_attention(
        query, key, value, int(head_num), input_layout, pse, padding_mask, atten_mask, float(scale), float(keep_prob),
        int(pre_tockens), int(next_tockens), int(inner_precise), _ints(prefix), _ints(actual_seq_qlen),
        _ints(actual_seq_kvlen), int(sparse_mode), bool(gen_mask_parallel), bool(sync), softmax_layout, sink,
        dropout_mask, int(seed), int(offset))


def npu_fusion_attention_grad(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, dy: torch.Tensor,
                              head_num: int, input_layout: str, *, pse: torch.Tensor | None = None,
                              padding_mask: torch.Tensor | None = None, atten_mask: torch.Tensor | None = None,
                              softmax_max: torch.Tensor | None = None, softmax_sum: torch.Tensor | None = None,
                              softmax_in: torch.Tensor | None = None, attention_in: torch.Tensor | None = None,
                              scale_value: float = 1.0, keep_prob: float = 1.0, pre_tockens: int = _NO_LIMIT,
                              next_tockens: int = _NO_LIMIT, inner_precise: int = 0, seed: int = 0, offset: int = 0,
                              numels: int = 0, prefix: Any = None, actual_seq_qlen: Any = None,
                              actual_seq_kvlen: Any = None, sparse_mode: int = 0, gen_mask_parallel: bool = True,
                              sync: bool = False, softmax_layout: str = "",
                              sink: torch.Tensor | None = None) -> tuple:
    """The backward of npu_fusion_attention: (dq, dk, dv, dpse, dsink)."""
    register()
    return torch.ops.npu.npu_fusion_attention_grad(
        query, key, value, dy, int(head_num), input_layout, pse=pse, padding_mask=padding_mask,
        atten_mask=atten_mask, softmax_max=softmax_max, softmax_sum=softmax_sum, softmax_in=softmax_in,
        attention_in=attention_in, scale_value=float(scale_value), keep_prob=float(keep_prob),
        pre_tockens=int(pre_tockens), next_tockens=int(next_tockens), inner_precise=int(inner_precise),
        seed=int(seed), offset=int(offset), numels=int(numels), prefix=_ints(prefix),
        actual_seq_qlen=_ints(actual_seq_qlen), actual_seq_kvlen=_ints(actual_seq_kvlen),
        sparse_mode=int(sparse_mode), gen_mask_parallel=bool(gen_mask_parallel), sync=bool(sync),
        softmax_layout=softmax_layout, sink=sink)


def npu_fusion_attention_v3(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, head_num: int,
                            input_layout: str, pse: torch.Tensor | None = None,
                            padding_mask: torch.Tensor | None = None, atten_mask: torch.Tensor | None = None,
                            scale: float = 1.0, keep_prob: float = 1.0, pre_tockens: int = _NO_LIMIT,
                            next_tockens: int = _NO_LIMIT, inner_precise: int = 0, prefix: Any = None,
                            actual_seq_qlen: Any = None, actual_seq_kvlen: Any = None, sparse_mode: int = 0,
                            gen_mask_parallel: bool = True, sync: bool = False, softmax_layout: str = "",
                            sink: torch.Tensor | None = None) -> tuple:
    """npu_fusion_attention with the cumulative sequence lengths as tensors, returning (attention_out,
    softmax_max, softmax_sum, softmax_out, seed, offset), seed and offset as 1-element int64 tensors on the
    device (its backward, npu_fusion_attention_grad_v3, takes them so)."""
    register()
    return torch.ops.npu.npu_fusion_attention_v3(
        query, key, value, int(head_num), input_layout, pse, padding_mask, atten_mask, float(scale), float(keep_prob),
        int(pre_tockens), int(next_tockens), int(inner_precise), _ints(prefix), _lengths(actual_seq_qlen),
        _lengths(actual_seq_kvlen), int(sparse_mode), bool(gen_mask_parallel), bool(sync), softmax_layout, sink)


def npu_fusion_attention_grad_v3(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, dy: torch.Tensor,
                                 head_num: int, input_layout: str, *, pse: torch.Tensor | None = None,
                                 padding_mask: torch.Tensor | None = None, atten_mask: torch.Tensor | None = None,
                                 softmax_max: torch.Tensor | None = None, softmax_sum: torch.Tensor | None = None,
                                 softmax_in: torch.Tensor | None = None, attention_in: torch.Tensor | None = None,
                                 scale_value: float = 1.0, keep_prob: float = 1.0, pre_tockens: int = _NO_LIMIT,
                                 next_tockens: int = _NO_LIMIT, inner_precise: int = 0,
                                 seed: torch.Tensor | None = None, offset: torch.Tensor | None = None,
                                 prefix: Any = None, actual_seq_qlen: Any = None, actual_seq_kvlen: Any = None,
                                 sparse_mode: int = 0, gen_mask_parallel: bool = True, sync: bool = False,
                                 softmax_layout: str = "", sink: torch.Tensor | None = None) -> tuple:
    """The backward of npu_fusion_attention_v3: (dq, dk, dv, dpse, dsink); seed and offset are tensors."""
    register()
    return torch.ops.npu.npu_fusion_attention_grad_v3(
        query, key, value, dy, int(head_num), input_layout, pse=pse, padding_mask=padding_mask,
        atten_mask=atten_mask, softmax_max=softmax_max, softmax_sum=softmax_sum, softmax_in=softmax_in,
        attention_in=attention_in, scale_value=float(scale_value), keep_prob=float(keep_prob),
        pre_tockens=int(pre_tockens), next_tockens=int(next_tockens), inner_precise=int(inner_precise),
        seed=_lengths(seed), offset=_lengths(offset), prefix=_ints(prefix),
        actual_seq_qlen=_lengths(actual_seq_qlen), actual_seq_kvlen=_lengths(actual_seq_kvlen),
        sparse_mode=int(sparse_mode), gen_mask_parallel=bool(gen_mask_parallel), sync=bool(sync),
        softmax_layout=softmax_layout, sink=sink)


def _npu_dropout_gen_mask(input: torch.Tensor, size: Any, p: float, seed: int, offset: int, *,
                          parallel: bool | None = True, sync: bool | None = None) -> torch.Tensor:
    """The bit-packed keep mask (uint8, LSB first, 1 = kept, padded to 128 elements) of a dropout with drop
    probability p over prod(size) elements, drawn at (seed, offset) on input's device: the mask the fused ops
    draw from the same (seed, offset) (npu_dropout.py)."""
    register()
    return torch.ops.npu._npu_dropout_gen_mask.Tensor(input, [int(n) for n in size], float(p), int(seed), int(offset),
                                                      parallel=parallel, sync=sync)


def npu_rms_norm(input: torch.Tensor, gamma: torch.Tensor, epsilon: float = 1e-6) -> tuple:
    """(x * rsqrt(mean(x^2 over gamma's dims) + epsilon) * gamma, rstd); rstd is float32, keepdim."""
    register()
    return torch.ops.npu.npu_rms_norm(input, gamma, float(epsilon))


def npu_add_rms_norm(x1: torch.Tensor, x2: torch.Tensor, gamma: torch.Tensor, epsilon: float = 1e-6) -> tuple:
    """(rms_norm(x1 + x2), rstd, x1 + x2)."""
    register()
    return torch.ops.npu.npu_add_rms_norm(x1, x2, gamma, float(epsilon))


def npu_rotary_mul(input: torch.Tensor, r1: torch.Tensor, r2: torch.Tensor, rotary_mode: str = "half",
                   rotate: torch.Tensor | None = None) -> torch.Tensor:
    """input * r1 + rotate(input) * r2: rotate_half (cat(-x2, x1)), 'interleave' pairs, or input @ rotate.
    r1/r2 (cos/sin) broadcast to the input (BSND: 1S1D; BNSD: 11SD; SBND: S11D; TND: T1D)."""
    register()
    return torch.ops.npu.npu_rotary_mul(input, r1, r2, rotary_mode, rotate)


def npu_swiglu(input: torch.Tensor, dim: int = -1) -> torch.Tensor:
    """a, b = input.chunk(2, dim): silu(a) * b."""
    register()
    return torch.ops.npu.npu_swiglu(input, int(dim))


def npu_scaled_masked_softmax(x: torch.Tensor, mask: torch.Tensor, scale: float = 1.0,
                              fixed_triu_mask: bool = False) -> torch.Tensor:
    """softmax(x * scale, masked_fill(mask, -10000)) over the last axis (mask True = masked out);
    fixed_triu_mask=True masks the upper triangle instead of the mask given."""
    register()
    return torch.ops.npu.npu_scaled_masked_softmax(x, mask, scale, bool(fixed_triu_mask))


def npu_confusion_transpose(input: torch.Tensor, perm: Any, shape: Any, transpose_first: bool) -> torch.Tensor:
    """transpose_first: input.permute(perm).reshape(shape); else input.reshape(shape).permute(perm)."""
    register()
    return torch.ops.npu.npu_confusion_transpose(input, [int(p) for p in perm], [int(s) for s in shape],
                                                 bool(transpose_first))


def npu_gelu(input: torch.Tensor, *, approximate: str = "none") -> torch.Tensor:
    register()
    return torch.ops.npu.npu_gelu(input, approximate=approximate)


def npu_fast_gelu(input: torch.Tensor) -> torch.Tensor:
    """input / (1 + exp(-1.702 * input))."""
    register()
    return torch.ops.npu.npu_fast_gelu(input)


def fast_gelu(input: torch.Tensor) -> torch.Tensor:
    """torch_npu.fast_gelu: npu_fast_gelu's older name."""
    register()
    return torch.ops.npu.fast_gelu(input)


def npu_apply_adam_w(beta1_power: float, beta2_power: float, lr: float, weight_decay: float, beta1: float,
                     beta2: float, epsilon: float, grad: torch.Tensor, max_grad_norm: torch.Tensor | None = None,
                     amsgrad: bool | None = False, maximize: bool | None = False, *,
                     out: tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None = None) -> tuple:
    """One AdamW step of (var, m, v) = out, in place; returns out. beta1_power/beta2_power: beta**(step-1)."""
    if out is None or len(out) != 3:
        raise TypeError("npu_apply_adam_w updates var, m and v in place: pass them as out=(var, m, v) (as "
                        "DeepSpeed's NPU FusedAdam does)")
    register()
    var, m, v = out
    return torch.ops.npu.npu_apply_adam_w.out(float(beta1_power), float(beta2_power), float(lr),
                                              float(weight_decay), float(beta1), float(beta2), float(epsilon),
                                              grad, max_grad_norm, amsgrad, maximize, var=var, m=m, v=v)


def _format_id(acl_format: Any) -> int:
    if isinstance(acl_format, torch.Tensor):
        return get_npu_format(acl_format)
    return int(acl_format)


def _format_argument(op: str, acl_format: Any, other: Any, other_name: str) -> Any:
    """The format given positionally or under either of the vendor's overloads' names (acl_format: an int;
    dst / src: a tensor whose format to take)."""
    if (acl_format is None) == (other is None):
        raise TypeError(f"{op}() takes the target format once: as acl_format (an int or torch_npu.Format) or as "
                        f"{other_name} (a tensor whose format to take)")
    return acl_format if acl_format is not None else other


def _cast_target(input: torch.Tensor, target: int) -> int:
    """The format a cast of `input` to `target` gives: a tensor in NC1HWC0 cast to ND comes back in NCHW, its base
    format (torch_npu transposes 5HD data back to the 4-D layout it came from; op-plugin test_format_cast.py)."""
    found = getattr(input, "_npu_format", None)
    if found == Format.NC1HWC0 and target == Format.ND:
        return int(Format.NCHW)
    return target


def npu_format_cast(input: torch.Tensor, acl_format: Any = None, *, dst: torch.Tensor | None = None,
                    customize_dtype: int | None = None, input_dtype: int | None = None) -> torch.Tensor:
    """A copy of `input` in storage format `acl_format` (int, torch_npu.Format, or a tensor whose format to
    take: the vendor's dst overload). The emulated chip has one layout: the data is unchanged, and
    get_npu_format reports the format."""
    register()
    target = _cast_target(input, _format_id(_format_argument("npu_format_cast", acl_format, dst, "dst")))
    out = torch.ops.npu.npu_format_cast(input, target, customize_dtype=customize_dtype, input_dtype=input_dtype)
    out._npu_format = target
    return out


def npu_format_cast_(input: torch.Tensor, src: Any = None, *, acl_format: Any = None,
                     customize_dtype: int | None = None, input_dtype: int | None = None) -> torch.Tensor:
    """In place: `input` itself, now reporting format `src` (int, torch_npu.Format or a tensor)."""
    register()
    target = _cast_target(input, _format_id(_format_argument("npu_format_cast_", src, acl_format, "acl_format")))
    _format_cast(input, target)  # (the same check of the format id)
    input._npu_format = target
    return input


def get_npu_format(input: torch.Tensor) -> Format:
    """The tensor's storage format: the one a format cast gave it, else torch_npu's base format (NCHW for
    4-d, NCDHW for 5-d, ND otherwise)."""
    register()
    found = getattr(input, "_npu_format", None)
    return Format(found if found is not None else torch.ops.npu.get_npu_format(input))


# What an emulated torch_npu module carries: torch_npu.<name> = FUSED_OPS[name]
# Submodules of the emulated torch_npu beyond its top level: name under torch_npu -> the module that is it
# (plugin.py imports one when it is imported): the vendor's fused optimizers, as its docs import them.
PLUGIN_SUBMODULES = {"optim": "torch_fl.routing.emu.npu_optim",
                     "optim.npu_fused_optim_base": "torch_fl.routing.emu.npu_optim",
                     "npu.utils": "torch_fl.routing.emu.npu_utils",
                     "utils._step": "torch_fl.routing.emu.npu_step",
                     "onnx": "torch_fl.routing.emu.npu_onnx",
                     "profiler": "torch_fl.routing.emu.npu_profiler"}
# (imported when code imports them, not with the package: torch.onnx is heavy, and only export needs it)
LAZY_SUBMODULES = frozenset({"onnx", "profiler"})


def device_module_calls() -> dict[str, Any]:
    """The names torch_npu.npu (which is torch.npu) re-exports from torch_npu.npu.utils (its __all__): the plugin
    puts them on the device module when it is imported, as importing the real plugin does."""
    from . import npu_utils

    exported = ("StreamContext", "check_uce_in_memory", "clear_npu_overflow_flag", "current_blas_handle",
                "finalize_dump", "get_npu_overflow_flag", "get_sync_debug_mode", "init_dump", "ipc_collect",
                "obfuscation_calculate", "obfuscation_finalize", "obfuscation_initialize", "set_dump",
                "set_op_timeout_ms", "set_sync_debug_mode", "stress_detect")
    from .npu_runtime import npurt

    return {**{name: getattr(npu_utils, name) for name in exported}, "npurt": npurt}


def native_calls() -> dict[str, Any]:
    """The bindings of torch_npu._C beyond the device calls every plugin has (plugin.py), that the vendor's tests
    and Python code call: the SoC number, the inf/nan mode, the CANN version and the properties type."""
    from . import identity, memory, npu_runtime, npu_utils

    return {"_npu_npuCachingAllocator_set_allocator_settings": memory.set_allocator_settings,
            "_npurt": npu_runtime.native_module(),
            "_npu_get_soc_version": npu_utils.get_soc_version, "_npu_is_support_inf_nan": npu_utils.is_support_inf_nan,
            "_get_cann_version": npu_utils.get_cann_version, "_is_gte_cann_version": npu_utils._is_gte_cann_version,
            "_NPUDeviceProperties": identity.DeviceProperties}

FUSED_OPS: dict[str, Callable[..., Any]] = {
    "npu_fusion_attention": npu_fusion_attention,
    "npu_fusion_attention_grad": npu_fusion_attention_grad,
    "npu_fusion_attention_v3": npu_fusion_attention_v3,
    "npu_fusion_attention_grad_v3": npu_fusion_attention_grad_v3,
    "_npu_dropout_gen_mask": _npu_dropout_gen_mask,
    "npu_rms_norm": npu_rms_norm,
    "npu_add_rms_norm": npu_add_rms_norm,
    "npu_rotary_mul": npu_rotary_mul,
    "npu_swiglu": npu_swiglu,
    "npu_scaled_masked_softmax": npu_scaled_masked_softmax,
    "npu_confusion_transpose": npu_confusion_transpose,
    "npu_gelu": npu_gelu,
    "npu_fast_gelu": npu_fast_gelu,
    "fast_gelu": fast_gelu,
    "npu_apply_adam_w": npu_apply_adam_w,
    "npu_format_cast": npu_format_cast,
    "npu_format_cast_": npu_format_cast_,
    "get_npu_format": get_npu_format,
}

# The Tensor methods torch_npu adds (x.npu_format_cast(2), x.npu_confusion_transpose(...)), for an
# attacher that chooses to add them
TENSOR_METHODS: dict[str, Callable[..., Any]] = {
    "npu_format_cast": npu_format_cast,
    "npu_format_cast_": npu_format_cast_,
    "npu_confusion_transpose": npu_confusion_transpose,
}


def attach(module: Any) -> Any:
    """Register the ops and put FUSED_OPS, the aten-composed ops (npu_composed.py) and Format on `module` (an
    emulated ``torch_npu``); returns it."""
    from .npu_composed import COMPOSED_OPS

    register()
    for name, fn in {**COMPOSED_OPS, **FUSED_OPS}.items():
        setattr(module, name, fn)
    module.Format = Format
    import os

    if os.environ.get("PERF_DUMP_CONFIG") or os.environ.get("NPU_ASD_CONFIG"):
        from .npu_step import add_perf_dump_patch

        add_perf_dump_patch()  # (the vendor's import reads them: step time logs, the silent check's settings)
    return module
