"""npu_fusion_attention (v1 and v3, with their grad ops) and _npu_dropout_gen_mask of an emulated Ascend chip:
the reference math in aten ops and the ops' records (registered by npu_ops.register()). The vendor's
semantics are described in npu_ops.py's docstring."""

from __future__ import annotations

import inspect
import math
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any

import torch

from ...errors import VendorOpError
from . import npu_dropout
from .npu_common import LAYOUTS, NO_LIMIT, FusedOp, choice, compute_dtype, ints


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
    choice(op, "input_layout", input_layout, LAYOUTS)
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
                      pre_tockens: int = NO_LIMIT, next_tockens: int = NO_LIMIT, inner_precise: int = 0,
                      prefix: list[int] | None = None, actual_seq_qlen: list[int] | None = None,
                      actual_seq_kvlen: list[int] | None = None, sparse_mode: int = 0,
                      gen_mask_parallel: bool = True, sync: bool = False, softmax_layout: str = "",
                      sink: torch.Tensor | None = None, dropout_mask: torch.Tensor | None = None, seed: int = 0,
                      offset: int = 0) -> tuple:
    op = "npu_fusion_attention"
    g = _geometry(op, query, key, value, head_num, input_layout, actual_seq_qlen, actual_seq_kvlen)
    _check_sparse(op, g, atten_mask, sparse_mode, pse, padding_mask, keep_prob)
    _check_newer(op, sink)
    ct = compute_dtype(query)
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


def _fusion_attention_fake(*args: Any, **kwargs: Any) -> tuple:
    """The shapes of _fusion_attention's results, its arguments (the kernel's: one signature) checked as the
    kernel checks them."""
    bound = _FA_KERNEL.bind(*args, **kwargs)
    bound.apply_defaults()
    a = SimpleNamespace(**bound.arguments)
    op = "npu_fusion_attention"
    g = _geometry(op, a.query, a.key, a.value, a.head_num, a.input_layout, a.actual_seq_qlen, a.actual_seq_kvlen)
    _check_sparse(op, g, a.atten_mask, a.sparse_mode, a.pse, a.padding_mask, a.keep_prob)
    _check_newer(op, a.sink)
    query, dropout = a.query, a.keep_prob < 1.0
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
            query.new_empty((0,)), a.seed if dropout else 0, a.offset if dropout else 0, numels if dropout else 0)


_FA_KERNEL = inspect.signature(_fusion_attention)


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
                           scale_value: float = 1.0, keep_prob: float = 1.0, pre_tockens: int = NO_LIMIT,
                           next_tockens: int = NO_LIMIT, inner_precise: int = 0, seed: int = 0, offset: int = 0,
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
    ct = compute_dtype(query)
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
    return _fusion_attention_grad_v3_fake(query, key, value, dy, head_num, input_layout, **kwargs)


_FA_ARGS = tuple(_FA_KERNEL.parameters)  # (the schema's, in its order)


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


def _fusion_attention_v3(*args: Any, **kwargs: Any) -> tuple:
    """npu_fusion_attention_v3: v1's arguments up to sink (_FA3_ARGS), the sequence lengths as tensors; seed and
    offset come back as tensors."""
    call = {**dict(zip(_FA3_ARGS, args, strict=False)), **kwargs}  # (the dispatcher drops trailing defaults)
    for lengths in ("actual_seq_qlen", "actual_seq_kvlen"):
        call[lengths] = ints(call.get(lengths))
    out, smax, ssum, sout, seed, offset, _ = _fusion_attention(**call)
    return out, smax, ssum, sout, _long(seed, call["query"]), _long(offset, call["query"])


def _fusion_attention_v3_fake(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, head_num: int,
                              input_layout: str, *args: Any, **kwargs: Any) -> tuple:
    out, smax, ssum, sout = _fusion_attention_fake(query, key, value, head_num, input_layout)[:4]
    if input_layout == "TND":  # (the fake of v1 takes the lengths as lists; T x N x 8 whatever they are)
        smax = ssum = query.new_empty((query.shape[0], query.shape[1], 8), dtype=torch.float32)
    return (out, smax, ssum, sout, query.new_empty((1,), dtype=torch.long),
            query.new_empty((1,), dtype=torch.long))


def _fusion_attention_grad_v3(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, dy: torch.Tensor,
                              head_num: int, input_layout: str, *, seed: torch.Tensor | None = None,
                              offset: torch.Tensor | None = None, actual_seq_qlen: torch.Tensor | None = None,
                              actual_seq_kvlen: torch.Tensor | None = None, **kwargs: Any) -> tuple:
    """npu_fusion_attention_grad_v3: npu_fusion_attention_grad with the sequence lengths, seed and offset as
    tensors (its other arguments are v1's, passed on as they are)."""
    return _fusion_attention_grad(query, key, value, dy, head_num, input_layout, seed=_int_of(seed),
                                  offset=_int_of(offset), actual_seq_qlen=ints(actual_seq_qlen),
                                  actual_seq_kvlen=ints(actual_seq_kvlen), **kwargs)


def _fusion_attention_grad_v3_fake(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, dy: torch.Tensor,
                                   head_num: int, input_layout: str, **kwargs: Any) -> tuple:
    """The gradients' shapes (v1's fake checks the geometry first; v3's lengths are tensors, unread while faking)."""
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

OPS: tuple[FusedOp, ...] = (
    FusedOp(_FA_SCHEMA, _fusion_attention, _fusion_attention_fake, _fa_backward, _fa_setup),
    FusedOp(_FA_GRAD_SCHEMA, _fusion_attention_grad, _fusion_attention_grad_fake),
    FusedOp(_FA3_SCHEMA, _fusion_attention_v3, _fusion_attention_v3_fake, _fa3_backward, _fa3_setup),
    FusedOp(_FA3_GRAD_SCHEMA, _fusion_attention_grad_v3, _fusion_attention_grad_v3_fake),
    FusedOp("_npu_dropout_gen_mask.Tensor(Tensor self, int[] size, float p, int seed, int offset, *, bool? parallel=True, "
        "bool? sync=None) -> Tensor", _dropout_gen_mask, _dropout_gen_mask_fake),
)
