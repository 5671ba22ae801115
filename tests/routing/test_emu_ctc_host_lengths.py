"""F.ctc_loss with the lengths on the host: CUDA's kernel reads input_lengths/target_lengths on the CPU
and accepts them there, so the emulated device does too (routing/emu/tensor.py `_HOST_ARGUMENTS`), with the
CPU's loss and gradient. reduction='mean' divides the device loss by the host target_lengths tensor in
ATen's composite, which a real accelerator refuses as a device mismatch: the emulator says the same."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import torch_fl


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


def test_ctc_loss_mean_with_host_lengths_is_a_device_mismatch_as_on_cuda(monkeypatch):
    monkeypatch.setenv("FL_DEVICE", "emu:cuda")
    torch_fl.reset()
    dev = torch_fl.device()
    log_probs = torch.randn(12, 2, 5).log_softmax(2).to(dev)
    targets = torch.randint(1, 5, (2, 4)).to(dev)
    with pytest.raises(RuntimeError, match="Expected all tensors to be on the same device"):
        F.ctc_loss(log_probs, targets, torch.tensor([12, 10]), torch.tensor([4, 3]), reduction="mean")
    # with the lengths on the device (what CUDA code does), mean works
    loss = F.ctc_loss(log_probs, targets, torch.tensor([12, 10]).to(dev), torch.tensor([4, 3]).to(dev))
    assert loss.device == dev
