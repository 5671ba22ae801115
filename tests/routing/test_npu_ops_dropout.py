"""The emulated chip's dropout masks (``torch_npu._npu_dropout_gen_mask``), fused attention v3 and the format cast
out of NC1HWC0, checked as op-plugin's own tests check them (test_npu_dropout_gen_mask.py,
test_npu_flash_attention.py, test_npu_flash_attention_grad.py, test_format_cast.py), in our words.

Host checks run in this process (the reference math on CPU tensors); the emulated npu, whose slot name is
fixed per process, runs in a fresh one."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from chip_process import run_on_chip  # tests/chip_process.py
from torch_fl.routing.emu import npu_dropout, npu_ops


def _bits(mask: torch.Tensor, count: int) -> torch.Tensor:
    return torch.from_numpy(np.unpackbits(mask.cpu().numpy(), count=count, bitorder="little")).to(torch.bool)


def test_a_mask_of_p_zero_keeps_everything_and_pads_with_zero_bytes():
    mask = npu_ops._npu_dropout_gen_mask(torch.randn(32, 16), [32, 16], 0.0, 1, 0, parallel=False)
    # 512 elements: 512 / 8 = 64 bytes of ones, already a multiple of 128 elements
    assert mask.dtype == torch.uint8 and mask.shape == (64,) and bool((mask == 255).all())
    odd = npu_ops._npu_dropout_gen_mask(torch.randn(3), [17, 19], 0.0, 1, 0)
    assert odd.shape == (48,)  # 323 elements -> padded to 384 -> 48 bytes
    assert bool((odd[:41] == 255).all()) and bool((odd[41:] == 0).all())


def test_a_mask_depends_only_on_seed_offset_and_p_and_drops_about_p():
    x = torch.randn(17, 19)
    a = npu_ops._npu_dropout_gen_mask(x, [17, 19], 0.7, 2, 100, parallel=True)
    b = npu_ops._npu_dropout_gen_mask(x, [17, 19], 0.7, 2, 100, parallel=False)
    assert torch.equal(a, b)
    assert not torch.equal(a, npu_ops._npu_dropout_gen_mask(x, [17, 19], 0.7, 3, 100))
    big = _bits(npu_ops._npu_dropout_gen_mask(x, [100000], 0.3, 7, 0), 100000)
    assert abs(big.float().mean().item() - 0.7) < 0.01
    # counter-based: the mask at offset k is the tail of the mask at offset 0
    tail = _bits(npu_ops._npu_dropout_gen_mask(x, [1000], 0.3, 7, 256), 1000)
    assert torch.equal(tail, big[256:1256])
    with pytest.raises(RuntimeError, match="not a probability"):
        npu_ops._npu_dropout_gen_mask(x, [4], 1.5, 1, 0)


def _reference(q, k, v, scale, keep=None, keep_prob=1.0):
    p = torch.softmax(q.float() @ k.float().transpose(-1, -2) * scale, -1)
    if keep is not None:
        p = p * keep / keep_prob
    return p @ v.float()


def test_fused_attention_with_dropout_uses_the_mask_gen_mask_draws_at_its_seed():
    b, n, s, d = 1, 2, 32, 16
    q, k, v = (torch.randn(b, n, s, d) for _ in range(3))
    out = npu_ops.npu_fusion_attention(q, k, v, n, "BNSD", scale=0.25, keep_prob=0.8, seed=11, offset=0)
    keep = _bits(npu_ops._npu_dropout_gen_mask(q, [b, n, s, s], 0.2, 11, 0), b * n * s * s).reshape(b, n, s, s)
    torch.testing.assert_close(out[0], _reference(q, k, v, 0.25, keep, 0.8), rtol=1e-5, atol=1e-5)
    # the same mask given as dropout_mask gives the same result, and so does its gradient
    given = npu_ops._npu_dropout_gen_mask(q, [b, n, s, s], 0.2, 11, 0)
    qg = q.clone().requires_grad_()
    with_mask = npu_ops.npu_fusion_attention(qg, k, v, n, "BNSD", scale=0.25, keep_prob=0.8, dropout_mask=given,
                                             seed=11, offset=0)
    torch.testing.assert_close(with_mask[0], out[0])
    with_mask[0].sum().backward()
    qr = q.clone().requires_grad_()
    _reference(qr, k, v, 0.25, keep, 0.8).sum().backward()
    torch.testing.assert_close(qg.grad, qr.grad, rtol=1e-4, atol=1e-5)


def test_the_grad_op_regenerates_the_forwards_mask_from_seed_and_offset():
    b, n, s, d = 1, 2, 16, 8
    q, k, v, dy = (torch.randn(b, n, s, d) for _ in range(4))
    keep = _bits(npu_ops._npu_dropout_gen_mask(q, [b, n, s, s], 0.1, 2, 0), b * n * s * s).reshape(b, n, s, s)
    qr = q.clone().requires_grad_()
    (_reference(qr, k, v, 0.3, keep, 0.9) * dy).sum().backward()
    grads = npu_ops.npu_fusion_attention_grad(q, k, v, dy, n, "BNSD", scale_value=0.3, keep_prob=0.9, seed=2,
                                              offset=0, numels=b * n * s * s)
    torch.testing.assert_close(grads[0], qr.grad, rtol=1e-4, atol=1e-5)
    v3 = npu_ops.npu_fusion_attention_grad_v3(q, k, v, dy, n, "BNSD", scale_value=0.3, keep_prob=0.9,
                                              seed=torch.tensor(2), offset=torch.tensor(0))
    torch.testing.assert_close(v3[0], grads[0])


def test_v3_returns_seed_and_offset_tensors_and_trains_like_v1():
    q, k, v = (torch.randn(2, 8, 32) for _ in range(3))
    out = npu_ops.npu_fusion_attention_v3(q, k, v, head_num=4, input_layout="BSH", scale=0.125)
    ref = npu_ops.npu_fusion_attention(q, k, v, head_num=4, input_layout="BSH", scale=0.125)
    assert len(out) == 6
    torch.testing.assert_close(out[0], ref[0])
    assert out[4].dtype == out[5].dtype == torch.long and out[4].shape == out[5].shape == (1,)
    qs = [t.clone().requires_grad_() for t in (q, q)]
    npu_ops.npu_fusion_attention_v3(qs[0], k, v, 4, "BSH", scale=0.125)[0].pow(2).sum().backward()
    npu_ops.npu_fusion_attention(qs[1], k, v, 4, "BSH", scale=0.125)[0].pow(2).sum().backward()
    torch.testing.assert_close(qs[0].grad, qs[1].grad)
    # TND: cumulative lengths as a tensor
    t = torch.randn(6, 2, 8)
    lens = torch.tensor([1, 3, 6])
    tnd = npu_ops.npu_fusion_attention_v3(t, t, t, 2, "TND", scale=0.3, actual_seq_qlen=lens, actual_seq_kvlen=lens)
    ref = npu_ops.npu_fusion_attention(t, t, t, 2, "TND", scale=0.3, actual_seq_qlen=[1, 3, 6],
                                       actual_seq_kvlen=[1, 3, 6])
    torch.testing.assert_close(tnd[0], ref[0])
    torch.testing.assert_close(tnd[1], ref[1])


def test_a_seedless_dropout_draws_from_the_generator_seed_and_starts_at_offset_zero():
    q = torch.randn(1, 1, 8, 4)
    generator = torch.Generator()
    generator.manual_seed(5)
    assert npu_dropout.draw(generator) == (5, 0)
    seed, offset = npu_dropout.draw(generator)  # not fresh any more: a new offset, drawn from the generator
    assert seed == 5 and offset > 0 and offset % npu_dropout.ALIGN == 0
    generator.manual_seed(5)
    npu_dropout.draw(generator)
    assert npu_dropout.draw(generator) == (seed, offset)  # what follows a seeding is reproducible
    torch.manual_seed(3)
    first = npu_ops.npu_fusion_attention(q, q, q, 1, "BNSD", keep_prob=0.5)
    assert (first[4], first[5]) == (3, 0)


def test_a_format_cast_from_nc1hwc0_to_nd_comes_back_in_nchw():
    x = torch.randn(2, 2, 4, 4)
    five_hd = npu_ops.npu_format_cast(npu_ops.npu_format_cast(x, 2), 3)
    assert npu_ops.get_npu_format(npu_ops.npu_format_cast(five_hd, 2)) == npu_ops.Format.NCHW
    in_place = npu_ops.npu_format_cast_(torch.randn(2, 2, 4, 4), 3)
    assert npu_ops.get_npu_format(npu_ops.npu_format_cast_(in_place, 2)) == npu_ops.Format.NCHW
    # other casts to ND stay ND
    nz = npu_ops.npu_format_cast(x, 29)
    assert npu_ops.get_npu_format(npu_ops.npu_format_cast(nz, 2)) == npu_ops.Format.ND
    assert torch.equal(npu_ops.npu_format_cast(five_hd, 2), x)


ON_NPU = r'''
import json, numpy as np, torch, torch_npu
out = {}
torch.npu.manual_seed(2)
b, n, s, d = 1, 4, 64, 16
q, k, v = (torch.randn(b, s, n * d, dtype=torch.float16) for _ in range(3))
mask = torch_npu._npu_dropout_gen_mask(q.npu(), [b * n * s * s], p=0.1, seed=2, offset=0, parallel=True, sync=False)
out["mask"] = [str(mask.device), str(mask.dtype), list(mask.shape)]
keep = torch.from_numpy(np.unpackbits(mask.cpu().numpy(), count=b * n * s * s, bitorder="little"))
keep = keep.reshape(b, n, s, s).float()
res = torch_npu.npu_fusion_attention(q.npu(), k.npu(), v.npu(), head_num=n, input_layout="BSH", scale=0.25,
                                     keep_prob=0.9)
bnsd = [t.float().reshape(b, s, n, d).transpose(1, 2) for t in (q, k, v)]
p = torch.softmax(bnsd[0] @ bnsd[1].transpose(-1, -2) * 0.25, -1)
ref = ((p * keep / 0.9) @ bnsd[2]).transpose(1, 2).reshape(b, s, n * d).half()
out["attention"] = float((res[0].cpu().float() - ref.float()).abs().max())
out["seed"] = [int(res[4]), int(res[5])]
v3 = torch_npu.npu_fusion_attention_v3(q.npu(), k.npu(), v.npu(), head_num=n, input_layout="BSH", scale=0.25)
g = torch_npu.npu_fusion_attention_grad_v3(q.npu(), k.npu(), v.npu(), v3[0], head_num=n, input_layout="BSH",
                                           softmax_max=v3[1], softmax_sum=v3[2], attention_in=v3[0],
                                           scale_value=0.25, seed=torch.tensor(2), offset=torch.tensor(0))
out["v3"] = [str(v3[4].device), str(g[0].device), list(g[0].shape)]
x = torch_npu.npu_format_cast(torch.randn(2, 2, 4, 4).npu(), 3)
out["format"] = int(torch_npu.get_npu_format(torch_npu.npu_format_cast(x, 2)))
print(json.dumps(out))
'''


def test_on_the_emulated_npu():
    out = run_on_chip(ON_NPU, "npu")
    assert out["mask"] == ["npu:0", "torch.uint8", [2048]]
    assert out["attention"] < 2e-3
    assert out["seed"] == [2, 0]  # right after torch.npu.manual_seed(2): the device generator's seed, offset 0
    assert out["v3"] == ["npu:0", "npu:0", [1, 64, 64]]
    assert out["format"] == 0
