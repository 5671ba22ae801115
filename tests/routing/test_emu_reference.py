"""Chip-native ops the host has no kernel for run on the emulated device from reference math
(routing/reference.py); each is checked against the CPU's own composite path."""

from __future__ import annotations

import copy

import pytest
import torch
import torch.nn.functional as F

import torch_fl
from torch_fl.description import registry
from torch_fl.routing import reference


@pytest.fixture
def device(monkeypatch):
    monkeypatch.setenv("FL_DEVICE", "emu:cuda")
    torch_fl.reset()
    return torch_fl.device()


@pytest.mark.parametrize("chip", ["cuda", "rocm", "mps"])
def test_every_native_op_without_a_cpu_kernel_has_a_reference_or_a_reason(chip):
    missing = [op for op in registry.get(chip).native_ops()
               if op.startswith("aten::") and not reference.has_cpu_kernel(op)
               and not reference.has_reference(op) and reference.unreached_reason(op) is None]
    assert not missing, f"add these to routing/reference.py (REFERENCE or UNREACHED): {missing}"


def test_the_reference_table_names_only_ops_the_host_lacks():
    assert all(not reference.has_cpu_kernel(op) for op in reference._NAMES)


def _grads(module, inputs):
    out = module(*inputs)
    flat = out if isinstance(out, tuple) else (out,)
    flat = [t for o in flat for t in (o if isinstance(o, tuple) else (o,))]
    sum((t * torch.linspace(-1, 1, t.numel(), device=t.device).view_as(t)).sum() for t in flat).backward()
    return [t.detach().cpu() for t in flat], [p.grad.cpu() for p in module.parameters()], \
        [i.grad.cpu() for i in inputs]


@pytest.mark.parametrize("make", [
    lambda: torch.nn.LSTM(4, 6, num_layers=2), lambda: torch.nn.LSTM(4, 6, bias=False, bidirectional=True),
    lambda: torch.nn.GRU(4, 6, num_layers=2), lambda: torch.nn.GRU(4, 6, bias=False, batch_first=True),
    lambda: torch.nn.LSTMCell(4, 6), lambda: torch.nn.GRUCell(4, 6, bias=False),
], ids=["lstm", "lstm-nobias-bi", "gru", "gru-nobias-batchfirst", "lstmcell", "grucell"])
def test_fused_rnn_cells_equal_the_cpus_cell_math(device, make):
    torch.manual_seed(0)
    cpu = make()
    emu = copy.deepcopy(cpu).to(device)
    shape = (3, 4) if isinstance(cpu, torch.nn.RNNCellBase) else (5, 3, 4)
    x = torch.randn(shape, requires_grad=True)
    expected = _grads(cpu, (x,))
    torch_fl.reset_route_stats()
    actual = _grads(emu, (x.detach().to(device).requires_grad_(),))
    torch.testing.assert_close(actual, expected, rtol=1e-5, atol=1e-6)
    # the chip's own fused kernels ran (PyTorch picks them for an accelerator), not a translation
    assert not [r for r in torch_fl.route_stats() if "thnn" in r["op"]]


def test_matmuls_with_an_output_dtype_accumulate_in_float32(device):
    a, b = torch.randn(8, 16).half(), torch.randn(16, 4).half()
    bias = torch.randn(8, 4)
    expected = torch.mm(a.float(), b.float())
    assert torch.equal(torch.mm(a.to(device), b.to(device), out_dtype=torch.float32).cpu(), expected)
    got = torch.addmm(bias.to(device), a.to(device), b.to(device), out_dtype=torch.float32).cpu()
    torch.testing.assert_close(got, torch.addmm(bias, a.float(), b.float()))
    batch = torch.bmm(a[None].to(device), b[None].to(device), out_dtype=torch.float32).cpu()
    torch.testing.assert_close(batch[0], expected)


def test_sync_batch_norm_kernels_equal_batch_norm(device):
    torch.manual_seed(0)
    x = torch.randn(6, 3, 5, 5)
    weight, bias = torch.randn(3), torch.randn(3)
    mean, invstd = torch.batch_norm_stats(x.to(device), 1e-5)
    var, ref_mean = torch.var_mean(x, (0, 2, 3), correction=0)
    torch.testing.assert_close((mean.cpu(), invstd.cpu()), (ref_mean, (var + 1e-5).rsqrt()))
    # two "ranks" of 4 and 2 samples, combined, give the statistics of the whole batch
    parts = [torch.batch_norm_stats(p.to(device), 1e-5) for p in (x[:4], x[4:])]
    running_mean, running_var = torch.zeros(3, device=device), torch.ones(3, device=device)
    counts = torch.tensor([4 * 25, 2 * 25], dtype=torch.float32, device=device)
    mean, invstd = torch.batch_norm_gather_stats_with_counts(
        x.to(device), torch.stack([p[0] for p in parts]), torch.stack([p[1] for p in parts]),
        running_mean, running_var, 0.1, 1e-5, counts)
    torch.testing.assert_close((mean.cpu(), invstd.cpu()), (ref_mean, (var + 1e-5).rsqrt()))
    ref_rm, ref_rv = torch.zeros(3), torch.ones(3)
    xr = x.clone().requires_grad_()
    w, b = weight.clone().requires_grad_(), bias.clone().requires_grad_()
    out = F.batch_norm(xr, ref_rm, ref_rv, w, b, training=True, momentum=0.1, eps=1e-5)
    torch.testing.assert_close((running_mean.cpu(), running_var.cpu()), (ref_rm, ref_rv))
    y = torch.batch_norm_elemt(x.to(device), weight.to(device), bias.to(device), mean, invstd, 1e-5)
    torch.testing.assert_close(y.cpu(), out.detach(), rtol=1e-5, atol=1e-5)
    grad = torch.randn_like(out)
    out.backward(grad)
    sum_dy, sum_dy_xmu, grad_w, grad_b = torch.batch_norm_backward_reduce(
        grad.to(device), x.to(device), mean, invstd, weight.to(device), True, True, True)
    torch.testing.assert_close((grad_w.cpu(), grad_b.cpu()), (w.grad, b.grad), rtol=1e-4, atol=1e-5)
    grad_x = torch.batch_norm_backward_elemt(grad.to(device), x.to(device), mean, invstd, weight.to(device),
                                             sum_dy, sum_dy_xmu, counts.int())
    torch.testing.assert_close(grad_x.cpu(), xr.grad, rtol=1e-4, atol=1e-5)


def test_depthwise_convolutions_equal_grouped_convolution(device):
    x, w, b = torch.randn(2, 4, 9, 9), torch.randn(4, 1, 3, 3), torch.randn(4)
    got = torch.ops.aten._conv_depthwise2d(x.to(device), w.to(device), [3, 3], b.to(device), [2, 2], [1, 1], [1, 1])
    torch.testing.assert_close(got.cpu(), F.conv2d(x, w, b, stride=2, padding=1, groups=4))
    x3, w3 = torch.randn(1, 2, 5, 5, 5), torch.randn(2, 1, 3, 3, 3)
    got = torch.ops.aten.conv_depthwise3d(x3.to(device), w3.to(device), [3, 3, 3], None, [1, 1, 1], [0, 0, 0],
                                          [1, 1, 1])
    torch.testing.assert_close(got.cpu(), F.conv3d(x3, w3, groups=2))


def test_fused_rms_norm_backward_equals_autograd_of_rms_norm(device):
    x, w = torch.randn(4, 6, requires_grad=True), torch.randn(6, requires_grad=True)
    out = F.rms_norm(x, (6,), w, eps=1e-6)
    grad = torch.randn_like(out)
    out.backward(grad)
    rstd = (x.detach().pow(2).mean(-1, keepdim=True) + 1e-6).rsqrt()
    grad_x, grad_w = torch.ops.aten._fused_rms_norm_backward(grad.to(device), x.detach().to(device), [6],
                                                             rstd.to(device), w.detach().to(device), [True, True])
    torch.testing.assert_close((grad_x.cpu(), grad_w.cpu()), (x.grad, w.grad), rtol=1e-5, atol=1e-5)


def test_dropout_kernels_keep_p_and_scale(device):
    x = torch.randn(64, 64)
    out, mask = torch.ops.aten._fused_dropout(x.to(device), 0.75)
    assert mask.dtype == torch.uint8 and set(mask.cpu().unique().tolist()) <= {0, 1}
    assert 0.6 < mask.cpu().float().mean() < 0.9  # 0.75 is the probability to keep
    torch.testing.assert_close(out.cpu(), x * mask.cpu() / 0.75)
    scaled = torch.ops.aten._masked_scale(x.to(device), mask, 2.0)
    torch.testing.assert_close(scaled.cpu(), x * mask.cpu() * 2.0)


def test_record_stream_and_ctc_loss_run_as_on_the_chip(device):
    x = torch.randn(4, device=device)
    x.record_stream(torch.fl.Stream())  # CUDA code hands a tensor to a side stream this way
    torch.manual_seed(0)
    log_probs = torch.randn(12, 2, 5).log_softmax(2)
    targets = torch.randint(1, 5, (2, 4), dtype=torch.long)
    lengths, target_lengths = torch.full((2,), 12, dtype=torch.long), torch.full((2,), 4, dtype=torch.long)
    expected = F.ctc_loss(log_probs, targets, lengths, target_lengths)
    got = F.ctc_loss(log_probs.to(device), targets.to(device), lengths.to(device), target_lengths.to(device))
    torch.testing.assert_close(got.cpu(), expected)


@pytest.mark.parametrize("make, shape", [
    (lambda: torch.nn.LazyLinear(3), (2, 4)), (lambda: torch.nn.LazyConv2d(3, 3), (1, 2, 8, 8)),
    (lambda: torch.nn.LazyBatchNorm1d(), (4, 5)),
], ids=["linear", "conv2d", "batchnorm"])
def test_lazy_modules_materialize_on_the_device(device, make, shape):
    torch.manual_seed(0)
    cpu = make()
    torch.manual_seed(0)
    emu = make().to(device)
    x = torch.randn(shape)
    torch.manual_seed(1)
    expected = cpu(x)
    torch.manual_seed(1)
    got = emu(x.to(device))
    assert got.device == device and all(p.device == device for p in emu.parameters())
    assert all(isinstance(p, torch.nn.Parameter) for p in emu.parameters())
    torch.testing.assert_close(got.cpu(), expected)


def test_assigning_data_replaces_what_the_device_tensor_computes_with(device):
    param = torch.nn.Parameter(torch.zeros(2, device=device))
    param.data = torch.arange(6.0, device=device).view(2, 3)
    assert param.shape == (2, 3) and torch.equal((param * 2).cpu(), torch.arange(6.0).view(2, 3) * 2)


def test_in_place_view_ops_change_the_device_tensors_shape(device):
    x = torch.arange(6.0).view(3, 1, 2)
    y = x.to(device)
    y.transpose_(0, 1)
    y.squeeze_(0)
    assert y.shape == (3, 2) and torch.equal(y.cpu(), x.transpose(0, 1).squeeze(0))
    z = torch.arange(24.0).view(4, 6).to(device)
    z.as_strided_((2, 2), (6, 1), 1)
    assert z.storage_offset() == 1 and torch.equal(z.cpu(), torch.tensor([[1.0, 2.0], [7.0, 8.0]]))
