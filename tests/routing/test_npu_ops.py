"""The vendor's fused ops of an emulated Ascend chip (routing/emu/npu_ops.py), each checked against
reference math written independently here (scaled_dot_product_attention, F.rms_norm, complex rotation,
torch.optim.AdamW, ...), with the vendor's mask polarity, returned tuples, layouts and errors."""

from __future__ import annotations

import math
import sys
import types

import pytest
import torch
import torch.nn.functional as F
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.fx.experimental.proxy_tensor import make_fx

import torch_fl
from torch_fl.routing.emu import npu_attention, npu_fused, npu_ops

npu_ops.register()
npu = npu_ops  # the functions as torch_npu.<name> would be


def _rand(*shape, dtype=torch.float32, grad=False):
    return torch.randn(*shape, dtype=dtype).requires_grad_(grad)


def _to_layout(t: torch.Tensor, layout: str) -> torch.Tensor:
    """(B, N, S, D) -> the layout, written out per layout (not the module's helper)."""
    b, n, s, d = t.shape
    if layout == "BNSD":
        return t.contiguous()
    if layout == "BSND":
        return t.permute(0, 2, 1, 3).contiguous()
    if layout == "BSH":
        return t.permute(0, 2, 1, 3).reshape(b, s, n * d)
    if layout == "SBH":
        return t.permute(2, 0, 1, 3).reshape(s, b, n * d)
    raise AssertionError(layout)


def _sdpa(q, k, v, *, keep=None, scale=None, causal=False):
    """Reference attention in BNSD; `keep` is sdpa's polarity (True = attends), GQA by repeating kv."""
    group = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(group, 1), v.repeat_interleave(group, 1)
    return F.scaled_dot_product_attention(q, k, v, attn_mask=keep, scale=scale, is_causal=causal)


# --- npu_fusion_attention ---------------------------------------------------------------------------------
@pytest.mark.parametrize("layout", ["BSH", "SBH", "BSND", "BNSD"])
@pytest.mark.parametrize("kv_heads", [4, 2])
def test_fusion_attention_equals_sdpa_in_each_layout(layout, kv_heads):
    torch.manual_seed(0)
    b, n, s, d = 2, 4, 5, 8
    q, k, v = _rand(b, n, s, d), _rand(b, kv_heads, s, d), _rand(b, kv_heads, s, d)
    out = npu.npu_fusion_attention(_to_layout(q, layout), _to_layout(k, layout), _to_layout(v, layout), n, layout,
                                   scale=d ** -0.5)
    expected = _to_layout(_sdpa(q, k, v, scale=d ** -0.5), layout)
    assert out[0].shape == expected.shape == _to_layout(q, layout).shape
    torch.testing.assert_close(out[0], expected)


def test_fusion_attention_returns_the_vendors_seven_values():
    torch.manual_seed(0)
    q, k, v = (_rand(2, 4, 6, 8) for _ in range(3))
    out = npu.npu_fusion_attention(q, k, v, 4, "BNSD", scale=0.3)
    assert len(out) == 7
    attention, softmax_max, softmax_sum, softmax_out, seed, offset, numels = out
    assert [type(x) for x in (seed, offset, numels)] == [int, int, int]
    assert (seed, offset, numels) == (0, 0, 0)  # no dropout
    assert softmax_max.shape == softmax_sum.shape == (2, 4, 6, 8) and softmax_max.dtype == torch.float32
    assert softmax_out.numel() == 0  # reserved by the vendor
    scores = q @ k.transpose(-1, -2) * 0.3
    row_max = scores.amax(-1, keepdim=True)
    torch.testing.assert_close(softmax_max, row_max.expand(2, 4, 6, 8))
    torch.testing.assert_close(softmax_sum, torch.exp(scores - row_max).sum(-1, keepdim=True).expand(2, 4, 6, 8))
    torch.testing.assert_close(attention, _sdpa(q, k, v, scale=0.3))


def test_atten_mask_true_means_masked_out():
    torch.manual_seed(0)
    q, k, v = (_rand(1, 2, 4, 8) for _ in range(3))
    masked = torch.tensor([[False, True, False, True]] * 4)  # keys 1 and 3 are hidden from every query
    for mask in (masked, masked.to(torch.uint8)):
        out = npu.npu_fusion_attention(q, k, v, 2, "BNSD", atten_mask=mask, scale=0.5)[0]
        torch.testing.assert_close(out, _sdpa(q, k, v, keep=~masked, scale=0.5))
        only_visible = _sdpa(q, k[:, :, [0, 2]], v[:, :, [0, 2]], scale=0.5)
        torch.testing.assert_close(out, only_visible)


@pytest.mark.parametrize("shape", [(1, 1, 5, 7), (2, 1, 5, 7), (2, 3, 5, 7), (5, 7)])
def test_atten_mask_shapes_ss_11ss_b1ss_bnss(shape):
    torch.manual_seed(0)
    q, k, v = _rand(2, 3, 5, 8), _rand(2, 3, 7, 8), _rand(2, 3, 7, 8)
    mask = torch.rand(shape) < 0.3
    mask[..., 0] = False  # every query keeps one key
    out = npu.npu_fusion_attention(q, k, v, 3, "BNSD", atten_mask=mask, scale=0.4)[0]
    torch.testing.assert_close(out, _sdpa(q, k, v, keep=~mask, scale=0.4))


def test_sparse_modes_2_3_4_build_their_masks_from_the_compressed_one():
    torch.manual_seed(0)
    sq, skv = 4, 6
    q, k, v = _rand(1, 2, sq, 8), _rand(1, 2, skv, 8), _rand(1, 2, skv, 8)
    compressed = torch.triu(torch.ones(2048, 2048, dtype=torch.bool), diagonal=1)
    ones = torch.ones(sq, skv, dtype=torch.bool)

    top_left = npu.npu_fusion_attention(q, k, v, 2, "BNSD", atten_mask=compressed, sparse_mode=2, scale=0.3)[0]
    torch.testing.assert_close(top_left, _sdpa(q, k, v, keep=ones.tril(0), scale=0.3))  # row i sees keys <= i
    bottom_right = npu.npu_fusion_attention(q, k, v, 2, "BNSD", atten_mask=compressed, sparse_mode=3, scale=0.3)[0]
    torch.testing.assert_close(bottom_right, _sdpa(q, k, v, keep=ones.tril(skv - sq), scale=0.3))
    band = npu.npu_fusion_attention(q, k, v, 2, "BNSD", atten_mask=compressed, sparse_mode=4, pre_tockens=1,
                                    next_tockens=0, scale=0.3)[0]
    keep = ones.tril(skv - sq) & ~ones.tril(skv - sq - 2)  # the diagonal (from bottom-right) and one before
    torch.testing.assert_close(band, _sdpa(q, k, v, keep=keep, scale=0.3))


def test_sparse_mode_0_and_1_take_the_mask_as_given_and_mode_0_its_token_band():
    torch.manual_seed(0)
    q, k, v = (_rand(1, 2, 6, 8) for _ in range(3))
    pre, nxt = 2, 1
    ones = torch.ones(6, 6)
    # the vendor's own example of a defaultMask with pre/next tokens
    mask = (torch.triu(ones, diagonal=nxt + 1) + torch.tril(ones, diagonal=-pre - 1)).bool()
    expected = _sdpa(q, k, v, keep=~mask, scale=0.3)
    mode0 = npu.npu_fusion_attention(q, k, v, 2, "BNSD", atten_mask=mask, pre_tockens=pre, next_tockens=nxt,
                                     scale=0.3)[0]
    torch.testing.assert_close(mode0, expected)
    no_mask = torch.zeros(6, 6, dtype=torch.bool)  # mode 0 also masks outside the band of the token limits
    torch.testing.assert_close(npu.npu_fusion_attention(q, k, v, 2, "BNSD", atten_mask=no_mask, pre_tockens=pre,
                                                        next_tockens=nxt, scale=0.3)[0], expected)
    mode1 = npu.npu_fusion_attention(q, k, v, 2, "BNSD", atten_mask=mask, sparse_mode=1, pre_tockens=0,
                                     next_tockens=0, scale=0.3)[0]  # the token limits do not count in mode 1
    torch.testing.assert_close(mode1, expected)


def test_without_atten_mask_every_sparse_mode_is_full_attention():
    torch.manual_seed(0)
    q, k, v = (_rand(1, 2, 4, 8) for _ in range(3))
    full = _sdpa(q, k, v, scale=0.3)
    for mode in (0, 2, 3, 4):
        out = npu.npu_fusion_attention(q, k, v, 2, "BNSD", sparse_mode=mode, pre_tockens=0, next_tockens=0,
                                       scale=0.3)[0]
        torch.testing.assert_close(out, full)


def test_a_fully_masked_row_gives_zeros_not_nan():
    q, k, v = (_rand(1, 1, 3, 4) for _ in range(3))
    mask = torch.zeros(3, 3, dtype=torch.bool)
    mask[1] = True
    out = npu.npu_fusion_attention(q, k, v, 1, "BNSD", atten_mask=mask)[0]
    assert torch.isfinite(out).all() and torch.equal(out[0, 0, 1], torch.zeros(4))


def test_tnd_varlen_is_attention_per_sequence():
    torch.manual_seed(0)
    n, d = 2, 8
    q_lens, kv_lens = [2, 3, 4], [3, 3, 5]
    q, k, v = _rand(sum(q_lens) + 1, n, d), _rand(sum(kv_lens), n, d), _rand(sum(kv_lens), n, d)
    cq = [sum(q_lens[:i + 1]) for i in range(3)]
    ck = [sum(kv_lens[:i + 1]) for i in range(3)]
    compressed = torch.triu(torch.ones(2048, 2048, dtype=torch.bool), diagonal=1)
    for mask, mode in ((None, 0), (compressed, 3)):
        out = npu.npu_fusion_attention(q, k, v, n, "TND", atten_mask=mask, sparse_mode=mode, scale=0.3,
                                       actual_seq_qlen=tuple(cq), actual_seq_kvlen=ck)
        assert out[0].shape == (sum(q_lens) + 1, n, d) and out[1].shape == (sum(q_lens) + 1, n, 8)
        q0 = k0 = 0
        for q1, k1 in zip(cq, ck, strict=True):
            qi, ki, vi = (t.transpose(0, 1).unsqueeze(0) for t in (q[q0:q1], k[k0:k1], v[k0:k1]))
            keep = torch.ones(q1 - q0, k1 - k0, dtype=torch.bool).tril((k1 - k0) - (q1 - q0)) if mask is not None \
                else None
            expected = _sdpa(qi, ki, vi, keep=keep, scale=0.3)[0].transpose(0, 1)
            torch.testing.assert_close(out[0][q0:q1], expected)
            q0, k0 = q1, k1
        assert torch.equal(out[0][-1], torch.zeros(n, d))  # a token of no sequence
    full = npu.npu_fusion_attention(q, k, v, n, "TND", scale=0.3, actual_seq_qlen=cq, actual_seq_kvlen=ck)[0]
    trailing = npu.npu_fusion_attention(q, k, v, n, "TND", scale=0.3, actual_seq_qlen=[*cq[:2], 0],
                                        actual_seq_kvlen=[*ck[:2], 0])[0]  # the last batch takes no part
    torch.testing.assert_close(trailing[:cq[1]], full[:cq[1]])
    assert torch.equal(trailing[cq[1]:], torch.zeros(len(q) - cq[1], n, d))


def test_fusion_attention_gradients_gradcheck_float64():
    torch.manual_seed(0)
    q, k, v = _rand(2, 5, 16, dtype=torch.float64, grad=True), _rand(2, 4, 8, dtype=torch.float64, grad=True), \
        _rand(2, 4, 8, dtype=torch.float64, grad=True)  # BSH, 4 query heads over 2 kv heads (GQA)
    pse = _rand(1, 4, 5, 4, dtype=torch.float64, grad=True)
    mask = torch.triu(torch.ones(2048, 2048, dtype=torch.bool), diagonal=1)

    def attention(q, k, v, pse):
        return npu.npu_fusion_attention(q, k, v, 4, "BSH", pse=pse, atten_mask=mask, sparse_mode=3, scale=0.4)[0]

    assert torch.autograd.gradcheck(attention, (q, k, v, pse))


@pytest.mark.parametrize("layout", ["BSND", "SBH"])
def test_fusion_attention_gradients_equal_sdpa_gradients(layout):
    torch.manual_seed(0)
    q, k, v = (_rand(2, 4, 6, 8, grad=True) for _ in range(3))
    out = npu.npu_fusion_attention(*(_to_layout(t, layout) for t in (q, k, v)), 4, layout, scale=0.35,
                                   atten_mask=torch.triu(torch.ones(2048, 2048, dtype=torch.bool), 1),
                                   sparse_mode=2)[0]
    grad = torch.randn_like(out)
    got = torch.autograd.grad(out, (q, k, v), grad)
    expected = torch.autograd.grad(_to_layout(_sdpa(q, k, v, scale=0.35, causal=True), layout), (q, k, v), grad)
    for g, e in zip(got, expected, strict=True):
        torch.testing.assert_close(g, e)


def test_fusion_attention_grad_op_rebuilds_from_softmax_max_and_sum():
    torch.manual_seed(0)
    q, k, v = (_rand(1, 6, 2, 8, grad=True) for _ in range(3))
    out, smax, ssum, _, seed, offset, numels = npu.npu_fusion_attention(q, k, v, 2, "BSND", scale=0.3)
    dy = torch.randn_like(out)
    expected = torch.autograd.grad(out, (q, k, v), dy)
    # (dq, dk, dv, dpse, dsink): the vendor's grad returns the sink's gradient too since torch_npu 7.3
    dq, dk, dv, dpse, dsink = npu.npu_fusion_attention_grad(q, k, v, dy, 2, "BSND", softmax_max=smax,
                                                            softmax_sum=ssum, attention_in=out, scale_value=0.3,
                                                            seed=seed, offset=offset, numels=numels)
    for g, e in zip((dq, dk, dv), expected, strict=True):
        torch.testing.assert_close(g, e)
    assert dpse.numel() == 0 and dsink.numel() == 0


def test_dropout_regenerates_its_mask_from_the_returned_seed():
    torch.manual_seed(0)
    b, n, s, d = 1, 2, 5, 4
    q, k, v = (_rand(b, n, s, d, dtype=torch.float64, grad=True) for _ in range(3))
    out, _, _, _, seed, offset, numels = npu.npu_fusion_attention(q, k, v, n, "BNSD", keep_prob=0.7, scale=0.5)
    # no seed given: the generator's seed (the chip's Philox seed), at an offset drawn since the seeding
    assert seed == torch.initial_seed() == 0 and offset > 0 and numels == b * n * s * s
    keep = npu_attention._Dropout(0.7, seed, offset).next((b, n, s, s), q.device)
    probs = torch.softmax(q @ k.transpose(-1, -2) * 0.5, -1)
    expected = (probs * keep / 0.7) @ v  # the vendor's op-plugin test reference: softmax * drop_mask / keep_prob
    torch.testing.assert_close(out, expected)
    dy = torch.randn_like(out)
    for g, e in zip(torch.autograd.grad(out, (q, k, v), dy), torch.autograd.grad(expected, (q, k, v), dy),
                    strict=True):
        torch.testing.assert_close(g, e)


@pytest.mark.parametrize(("call", "error", "says"), [  # q: BSH, hidden 32; q4: BSND, 4 heads of 8
    pytest.param(lambda q, q4: npu.npu_fusion_attention(q, q, q, 4, "BHSD"), ValueError,
                 r"input_layout 'BHSD' is not one of .*did you mean 'B", id="unknown-layout"),
    pytest.param(lambda q, q4: npu.npu_fusion_attention(q, q, q, 4, "bsnd"), ValueError, "did you mean 'BSND'",
                 id="layout-case"),
    pytest.param(lambda q, q4: npu.npu_fusion_attention(q, q, q, 5, "BSH"), ValueError,
                 "head_num=5 does not divide the hidden size 32", id="heads-do-not-divide"),
    pytest.param(lambda q, q4: torch.ops.npu.npu_fusion_attention(q, q, q, 5, "BSH"), ValueError,
                 "head_num=5 does not divide", id="the-op-itself-checks"),
    pytest.param(lambda q, q4: npu.npu_fusion_attention(q4, q4, q4, 2, "BSND"), ValueError,
                 "head_num=2, but query has 4 heads", id="heads-of-the-query"),
    pytest.param(lambda q, q4: npu.npu_fusion_attention(q, q, q, 4, "BNSD"), ValueError, "takes 4-d tensors",
                 id="rank-of-the-layout"),
    pytest.param(lambda q, q4: npu.npu_fusion_attention(q, q, q, 6, "TND"), ValueError, "needs actual_seq_qlen",
                 id="tnd-lengths"),
    pytest.param(lambda q, q4: npu.npu_fusion_attention(q4, q4, q4, 4, "BSND", keep_prob=0.0), ValueError,
                 "keep_prob", id="keep-prob"),
    pytest.param(lambda q, q4: npu.npu_fusion_attention(q4, q4, q4, 4, "BSND", sparse_mode=6,
                                                        atten_mask=torch.ones(6, 6, dtype=torch.bool)),
                 NotImplementedError, "sparse_mode=6", id="sparse-mode"),
    pytest.param(lambda q, q4: npu.npu_fusion_attention(q4, q4, q4.double(), 4, "BSND"), ValueError, "one dtype",
                 id="mixed-dtypes"),
    pytest.param(lambda q, q4: npu.npu_fusion_attention(q4, q4, q4, 4, "BSND",
                                                        atten_mask=torch.ones(2048, 2048, dtype=torch.bool)),
                 ValueError, r"atten_mask of shape .* does not end in", id="mask-shape"),
])
def test_fusion_attention_bad_arguments_say_what_and_how(call, error, says):
    with pytest.raises(error, match=says):
        call(_rand(2, 6, 32), _rand(2, 6, 4, 8))


# --- norms ---------------------------------------------------------------------------------------------------
def test_rms_norm_returns_y_and_float32_rstd():
    torch.manual_seed(0)
    x, gamma = _rand(3, 5, 16), _rand(16)
    y, rstd = npu.npu_rms_norm(x, gamma, epsilon=1e-5)
    torch.testing.assert_close(y, F.rms_norm(x, (16,), gamma, eps=1e-5))
    assert rstd.shape == (3, 5, 1) and rstd.dtype == torch.float32
    torch.testing.assert_close(rstd, 1 / torch.sqrt((x * x).mean(-1, keepdim=True) + 1e-5))
    _, rstd2 = npu.npu_rms_norm(x, _rand(5, 16))  # gamma over the last two dims
    assert rstd2.shape == (3, 1, 1)
    low, _ = npu.npu_rms_norm(x.bfloat16(), gamma)  # bf16 input, float32 gamma: output in the input's dtype
    assert low.dtype == torch.bfloat16
    torch.testing.assert_close(low.float(), y, atol=2e-2, rtol=2e-2)
    with pytest.raises(ValueError, match="trailing dimensions"):
        npu.npu_rms_norm(x, _rand(8))


def test_rms_norms_gradcheck_float64():
    x, gamma = _rand(3, 4, 8, dtype=torch.float64, grad=True), _rand(8, dtype=torch.float64, grad=True)
    assert torch.autograd.gradcheck(lambda a, g: npu.npu_rms_norm(a, g)[0], (x, gamma))
    x2 = _rand(3, 4, 8, dtype=torch.float64, grad=True)
    assert torch.autograd.gradcheck(lambda a, b, g: npu.npu_add_rms_norm(a, b, g)[0::2], (x, x2, gamma))


def test_add_rms_norm_returns_the_norm_rstd_and_the_sum():
    x1, x2, gamma = _rand(2, 8), _rand(2, 8), _rand(8)
    y, rstd, total = npu.npu_add_rms_norm(x1, x2, gamma)
    torch.testing.assert_close(total, x1 + x2)
    torch.testing.assert_close(y, F.rms_norm(x1 + x2, (8,), gamma, eps=1e-6))
    assert rstd.shape == (2, 1)


# --- rotary ---------------------------------------------------------------------------------------------------
def _angles(s: int, d: int) -> torch.Tensor:
    return torch.arange(s)[:, None] * (1.0 / 10000 ** (torch.arange(0, d, 2) / d))[None, :]  # (S, D/2)


def test_rotary_mul_half_is_a_complex_rotation_of_the_two_halves():
    torch.manual_seed(0)
    b, s, n, d = 2, 5, 3, 8
    x, theta = _rand(b, s, n, d), _angles(s, d)
    cos = torch.cat((theta.cos(), theta.cos()), -1)[None, :, None, :]  # BSND with 1S1D cos/sin
    sin = torch.cat((theta.sin(), theta.sin()), -1)[None, :, None, :]
    out = npu.npu_rotary_mul(x, cos, sin)
    as_complex = torch.complex(x[..., :d // 2], x[..., d // 2:]) * torch.polar(torch.ones_like(theta), theta)[
        None, :, None, :]
    torch.testing.assert_close(out, torch.cat((as_complex.real, as_complex.imag), -1))
    bnsd = npu.npu_rotary_mul(x.transpose(1, 2), cos.transpose(1, 2), sin.transpose(1, 2))  # BNSD with 11SD
    torch.testing.assert_close(bnsd, out.transpose(1, 2))


def test_rotary_mul_interleave_rotates_adjacent_pairs():
    torch.manual_seed(0)
    s, d = 4, 8
    x, theta = _rand(1, 2, s, d), _angles(s, d)
    cos = theta.cos().repeat_interleave(2, -1)[None, None]
    sin = theta.sin().repeat_interleave(2, -1)[None, None]
    out = npu.npu_rotary_mul(x, cos, sin, rotary_mode="interleave")
    pairs = torch.view_as_complex(x.reshape(1, 2, s, d // 2, 2).contiguous()) * torch.polar(torch.ones_like(theta),
                                                                                          theta)
    torch.testing.assert_close(out, torch.view_as_real(pairs).flatten(-2))


def test_rotary_mul_with_a_rotate_matrix_and_its_errors():
    x, r1, r2 = _rand(1, 2, 3, 4), _rand(1, 1, 3, 4), _rand(1, 1, 3, 4)
    half = torch.zeros(4, 4)  # x @ half = cat(-x2, x1)
    half[2, 0] = half[3, 1] = -1
    half[0, 2] = half[1, 3] = 1
    torch.testing.assert_close(npu.npu_rotary_mul(x, r1, r2, rotate=half), npu.npu_rotary_mul(x, r1, r2))
    # the vendor's message, which its own test_npu_rotary_mul.py matches (a RuntimeError, as from its C++)
    with pytest.raises(RuntimeError, match="The rotary_mode of npu_rotary_mul should be half or interleave, but got "
                                           "halves; did you mean 'half'"):
        npu.npu_rotary_mul(x, r1, r2, rotary_mode="halves")
    with pytest.raises(ValueError, match="must be even"):
        npu.npu_rotary_mul(_rand(1, 2, 3, 5), r1[..., :5], r2[..., :5])
    with pytest.raises(ValueError, match="does not broadcast"):
        npu.npu_rotary_mul(x, _rand(2, 2, 3, 4), r2)


@pytest.mark.parametrize("mode", ["half", "interleave"])
def test_rotary_mul_gradcheck_float64(mode):
    x = _rand(2, 3, 2, 4, dtype=torch.float64, grad=True)
    r1, r2 = _rand(1, 3, 1, 4, dtype=torch.float64, grad=True), _rand(1, 3, 1, 4, dtype=torch.float64, grad=True)
    assert torch.autograd.gradcheck(lambda a, b, c: npu.npu_rotary_mul(a, b, c, mode), (x, r1, r2))


# --- activations and softmax ----------------------------------------------------------------------------------
def test_swiglu_is_silu_of_the_first_half_times_the_second():
    x = _rand(3, 4, 10)
    torch.testing.assert_close(npu.npu_swiglu(x), x[..., :5] * torch.sigmoid(x[..., :5]) * x[..., 5:])
    torch.testing.assert_close(npu.npu_swiglu(x, dim=1), F.silu(x[:, :2]) * x[:, 2:])
    assert torch.autograd.gradcheck(lambda a: npu.npu_swiglu(a, 0), (_rand(4, 3, dtype=torch.float64, grad=True),))
    with pytest.raises(ValueError, match="must be even"):
        npu.npu_swiglu(_rand(3, 5))


def test_scaled_masked_softmax_masks_where_true():
    torch.manual_seed(0)
    x = _rand(2, 2, 4, 6)
    mask = torch.rand(2, 1, 4, 6) < 0.4
    out = npu.npu_scaled_masked_softmax(x, mask, 0.5)
    torch.testing.assert_close(out, torch.softmax(torch.where(mask, torch.tensor(-10000.0), x * 0.5), -1))
    assert (out[mask.expand_as(out)] < 1e-6).all()
    triu = npu.npu_scaled_masked_softmax(x, torch.zeros_like(mask), 0.5, True)  # MindSpeed's causal call
    causal = torch.ones(4, 6, dtype=torch.bool).triu(1)
    torch.testing.assert_close(triu, torch.softmax((x * 0.5).masked_fill(causal, -10000.0), -1))
    x64 = _rand(2, 3, 4, dtype=torch.float64, grad=True)
    assert torch.autograd.gradcheck(lambda a: npu.npu_scaled_masked_softmax(a, mask[0, :, :3, :4], 0.7), (x64,))


def test_confusion_transpose_the_vendors_examples():
    x = _rand(2, 3, 4, 6)
    y = npu.npu_confusion_transpose(x, (0, 2, 1, 3), (2, 4, 18), True)
    assert y.shape == (2, 4, 18) and torch.equal(y, x.transpose(1, 2).reshape(2, 4, 18))
    y2 = npu.npu_confusion_transpose(x, (0, 2, 1), (2, 12, 6), False)
    assert y2.shape == (2, 6, 12) and torch.equal(y2, x.reshape(2, 12, 6).transpose(1, 2))
    x64 = _rand(2, 3, 4, dtype=torch.float64, grad=True)
    assert torch.autograd.gradcheck(lambda a: npu.npu_confusion_transpose(a, (1, 0, 2), (3, 8), True), (x64,))
    assert torch.autograd.gradcheck(lambda a: npu.npu_confusion_transpose(a, (1, 0), (6, 4), False), (x64,))
    with pytest.raises(ValueError, match="does not hold"):
        npu.npu_confusion_transpose(x, (0, 2, 1, 3), (2, 4, 17), True)


def test_gelus():
    x = _rand(4, 8)
    torch.testing.assert_close(npu.npu_gelu(x), 0.5 * x * (1 + torch.erf(x / math.sqrt(2))))
    torch.testing.assert_close(npu.npu_gelu(x, approximate="tanh"), F.gelu(x, approximate="tanh"))
    with pytest.raises(ValueError, match="did you mean 'tanh'"):
        npu.npu_gelu(x, approximate="tahn")
    torch.testing.assert_close(npu.npu_fast_gelu(x), x / (1 + torch.exp(-1.702 * x)))
    torch.testing.assert_close(npu.fast_gelu(torch.tensor([0.5991, 0.4094])), torch.tensor([0.4403, 0.2733]),
                               atol=1e-4, rtol=0)  # the vendor's documented example
    x64 = _rand(3, 4, dtype=torch.float64, grad=True)
    for fn in (npu.npu_fast_gelu, npu.fast_gelu, npu.npu_gelu, lambda a: npu.npu_gelu(a, approximate="tanh")):
        assert torch.autograd.gradcheck(fn, (x64,))


# --- optimizer and formats ---------------------------------------------------------------------------------
@pytest.mark.parametrize("amsgrad", [False, True])
def test_apply_adam_w_out_equals_torch_adamw(amsgrad):
    torch.manual_seed(0)
    lr, betas, eps, wd = 0.01, (0.9, 0.99), 1e-8, 0.1
    param = torch.nn.Parameter(torch.randn(10))
    reference = torch.optim.AdamW([param], lr=lr, betas=betas, eps=eps, weight_decay=wd, amsgrad=amsgrad)
    var, m, v = param.detach().clone(), torch.zeros(10), torch.zeros(10)
    max_v = torch.zeros(10)
    for step in range(1, 4):
        grad = torch.randn(10)
        param.grad = grad.clone()
        reference.step()
        out = npu.npu_apply_adam_w(betas[0] ** (step - 1), betas[1] ** (step - 1), lr, wd, betas[0], betas[1], eps,
                                   grad, max_v if amsgrad else None, amsgrad, False, out=(var, m, v))
        assert out[0] is var and out[1] is m and out[2] is v
        if amsgrad:
            max_v = torch.maximum(max_v, v)
        torch.testing.assert_close(var, param.detach())
    with pytest.raises(TypeError, match=r"out=\(var, m, v\)"):
        npu.npu_apply_adam_w(1, 1, lr, wd, 0.9, 0.99, eps, torch.ones(2))


def test_format_cast_and_get_npu_format():
    assert npu.get_npu_format(torch.ones(2, 3, 4, 5)) == npu.Format.NCHW == 0  # the vendor's example
    assert npu.get_npu_format(torch.ones(3, 4)) == npu.Format.ND == 2
    assert npu.get_npu_format(torch.ones(1, 2, 3, 4, 5)) == npu.Format.NCDHW == 30
    x = _rand(32, 32, grad=True)
    nz = npu.npu_format_cast(x, 29)
    assert npu.get_npu_format(nz) == npu.Format.FRACTAL_NZ and str(npu.get_npu_format(nz)) == "FRACTAL_NZ"
    assert nz is not x and torch.equal(nz, x) and npu.get_npu_format(x) == npu.Format.ND
    assert npu.get_npu_format(npu.npu_format_cast(x, nz)) == 29  # a tensor names the format to take
    nz.sum().backward()
    assert torch.equal(x.grad, torch.ones(32, 32))
    y = torch.ones(2, 3, 4, 5)
    assert npu.npu_format_cast_(y, npu.Format.NHWC) is y and npu.get_npu_format(y) == 1
    with pytest.raises(ValueError, match=r"not a torch_npu\.Format value"):
        npu.npu_format_cast(x, 7)


# --- tracing, registration, the emulated device -------------------------------------------------------------
def test_fake_kernels_give_the_real_shapes():
    q = _rand(2, 6, 32)
    real = npu.npu_fusion_attention(q, q, q, 4, "BSH", keep_prob=0.9)
    with FakeTensorMode():
        fake = npu.npu_fusion_attention(torch.empty(2, 6, 32), torch.empty(2, 6, 32), torch.empty(2, 6, 32), 4,
                                        "BSH", keep_prob=0.9)
        with pytest.raises(ValueError, match="does not divide"):
            npu.npu_fusion_attention(torch.empty(2, 6, 32), torch.empty(2, 6, 32), torch.empty(2, 6, 32), 5, "BSH")
        rms = npu.npu_rms_norm(torch.empty(2, 3, 8), torch.empty(8))
        swiglu = npu.npu_swiglu(torch.empty(2, 8))
    assert [t.shape for t in fake[:4]] == [t.shape for t in real[:4]] and fake[6] == real[6] == 2 * 4 * 6 * 6
    assert rms[0].shape == (2, 3, 8) and rms[1].shape == (2, 3, 1) and swiglu.shape == (2, 4)


def test_a_trace_keeps_the_vendors_ops_whole():
    def step(q, x, g):
        return npu.npu_fusion_attention(q, q, q, 4, "BSND")[0].sum() + npu.npu_rms_norm(x, g)[0].sum()

    graph = make_fx(step)(_rand(1, 3, 4, 8), _rand(2, 8), _rand(8))
    targets = {str(node.target) for node in graph.graph.nodes if node.op == "call_function"}
    assert {"npu.npu_fusion_attention.default", "npu.npu_rms_norm.default"} <= targets
    assert "aten.bmm.default" not in targets and "aten._softmax.default" not in targets


@pytest.mark.parametrize("op, args", [
    ("npu_rms_norm", lambda: (_rand(3, 8, grad=True), _rand(8, grad=True))),
    ("npu_rotary_mul", lambda: (_rand(1, 2, 3, 4, grad=True), _rand(1, 1, 3, 4), _rand(1, 1, 3, 4))),
    ("npu_swiglu", lambda: (_rand(3, 8, grad=True),)),
    ("npu_scaled_masked_softmax", lambda: (_rand(2, 4, 4, grad=True), torch.zeros(2, 4, 4, dtype=torch.bool), 0.5)),
    ("npu_fusion_attention", lambda: (*(_rand(1, 3, 2, 8, grad=True) for _ in range(3)), 2, "BSND")),
])
def test_opcheck(op, args):
    result = torch.library.opcheck(getattr(torch.ops.npu, op).default, args())
    assert set(result.values()) == {"SUCCESS"}


def test_fused_ops_attach_to_an_emulated_torch_npu():
    module = npu_ops.attach(types.ModuleType("torch_npu"))
    assert module.Format is npu_ops.Format
    for name, fn in npu_ops.FUSED_OPS.items():
        assert getattr(module, name) is fn
    expected = {"npu_fusion_attention", "npu_rms_norm", "npu_rotary_mul", "npu_swiglu", "npu_scaled_masked_softmax",
                "npu_confusion_transpose", "npu_gelu", "fast_gelu", "npu_format_cast", "get_npu_format"}
    assert expected <= set(npu_ops.FUSED_OPS)
    for name in expected - {"npu_format_cast"}:
        assert hasattr(torch.ops.npu, name)
    npu_ops.register()  # idempotent


def test_register_refuses_next_to_the_real_torch_npu(monkeypatch):
    monkeypatch.setattr(npu_ops, "_library", None)
    monkeypatch.setitem(sys.modules, "torch_npu", types.ModuleType("torch_npu"))
    with pytest.raises(RuntimeError, match="real torch_npu is installed"):
        npu_ops.register()
    emulated = types.ModuleType("torch_npu")  # torch-fl's own emulated package (plugin.py) is no vendor
    emulated.__torch_fl_emulation__ = "torch-fl: 'npu' emulated on the CPU"
    monkeypatch.setitem(sys.modules, "torch_npu", emulated)
    assert not npu_ops.vendor_present()


def test_kernel_route_names_the_vendors_kernel():
    route = npu_ops.kernel_route("npu::npu_rms_norm")
    assert route.kind == "kernel" and "reference math" in route.source and route.kernel is not None
    assert npu_ops.kernel_route("npu::npu_rms_norm.default") == route
    assert npu_ops.kernel_route("aten::mm.default") is None
    assert npu_ops.kernel_route("npu::npu_apply_adam_w.out").kernel is npu_fused._apply_adam_w_out


def test_on_the_emulated_npu_the_reference_maths_aten_ops_meet_the_route_table(monkeypatch):
    monkeypatch.setenv("FL_ROUTE", "aten::bmm=fallback")
    q = _rand(1, 3, 2, 8)
    with torch_fl.emulate("npu") as activation:
        qd = q.to(activation.device)
        with pytest.warns(torch_fl.errors.FallbackWarning, match="aten::bmm"):
            out = npu.npu_fusion_attention(qd, qd, qd, 2, "BSND")[0]
        routes = {(r["op"], r["route"]) for r in torch_fl.route_stats()}
    assert ("aten::bmm.default", "fallback") in routes and ("npu::npu_fusion_attention.default", "kernel") in routes
    torch.testing.assert_close(out.cpu(), npu.npu_fusion_attention(q, q, q, 2, "BSND")[0])


def test_on_the_emulated_npu_the_ops_run_on_device_and_count_as_the_vendors_kernel():
    from dispatch_record import CalledOps

    torch.manual_seed(0)
    q, k, v = (_rand(2, 6, 4, 8) for _ in range(3))
    x, gamma = _rand(3, 8), _rand(8)
    expected = npu.npu_fusion_attention(q, k, v, 4, "BSND", scale=0.3)[0]
    with torch_fl.emulate("npu") as activation:
        d = activation.device
        qd, kd, vd = (t.to(d).requires_grad_() for t in (q, k, v))
        ops = CalledOps()
        with ops:
            out = npu.npu_fusion_attention(qd, kd, vd, 4, "BSND", scale=0.3,
                                           atten_mask=torch.triu(torch.ones(6, 6, dtype=torch.bool), 1).to(d))
            out[0].sum().backward()
            y, _ = npu.npu_rms_norm(x.to(d), gamma.to(d))
        assert out[0].device == d and qd.grad.device == d and y.device == d
        routes = {(r["op"], r["route"]) for r in torch_fl.route_stats()}
    assert {("npu::npu_fusion_attention.default", "kernel"), ("npu::npu_fusion_attention_grad.default", "kernel"),
            ("npu::npu_rms_norm.default", "kernel")} <= routes
    # one call each reaches the device (the op and its backward op), as on the chip
    assert {"npu::npu_fusion_attention", "npu::npu_fusion_attention_grad", "npu::npu_rms_norm"} <= set(ops.names)
    assert "aten::bmm" not in ops.names
    causal = npu.npu_fusion_attention(q, k, v, 4, "BSND", scale=0.3,
                                      atten_mask=torch.triu(torch.ones(6, 6, dtype=torch.bool), 1))[0]
    torch.testing.assert_close(out[0].detach().cpu(), causal)
    torch.testing.assert_close(y.cpu(), npu.npu_rms_norm(x, gamma)[0])
    assert not torch.equal(causal, expected)
