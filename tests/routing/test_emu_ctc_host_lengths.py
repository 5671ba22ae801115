"""F.ctc_loss with the lengths on the host: CUDA's kernel reads input_lengths/target_lengths on the CPU
and accepts them there, so the emulated device should too, with the CPU's loss and gradient.

Not yet: the emulator's device check (routing/emu/tensor.py, `_unwrap_all`) refuses any host tensor that
is not 0-dim or an index, and stops at aten::_ctc_loss.Tensor. Marked xfail(strict) until that check
lets these ops' length arguments through; the strict mark fails the test once it passes."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import torch_fl


@pytest.mark.xfail(strict=True, raises=RuntimeError,
                   reason="emulated device check refuses host lengths at aten::_ctc_loss.Tensor (tensor.py)")
@pytest.mark.parametrize("reduction", ["none", "sum"])
def test_ctc_loss_with_host_lengths_equals_the_cpu(monkeypatch, reduction):
    monkeypatch.setenv("FL_DEVICE", "emu:cuda")
    torch_fl.reset()
    dev = torch_fl.device()
    torch.manual_seed(0)
    log_probs = torch.randn(12, 2, 5).log_softmax(2).requires_grad_()
    targets = torch.randint(1, 5, (2, 4))
    input_lengths, target_lengths = torch.tensor([12, 10]), torch.tensor([4, 3])
    expected = F.ctc_loss(log_probs, targets, input_lengths, target_lengths, reduction=reduction)
    expected.sum().backward()
    on_device = log_probs.detach().to(dev).requires_grad_()
    actual = F.ctc_loss(on_device, targets.to(dev), input_lengths, target_lengths, reduction=reduction)
    actual.sum().backward()
    assert actual.device == dev
    torch.testing.assert_close(actual.cpu(), expected.detach())
    torch.testing.assert_close(on_device.grad.cpu(), log_probs.grad)
