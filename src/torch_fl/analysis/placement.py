"""Where a trace's tensors live: fake stand-ins swapped into the model, fake or moved inputs, and which
calls are the device's rather than the host's (trace.py runs the step with them)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import torch


def fake_mode():
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.fx.experimental.symbolic_shapes import ShapeEnv

    # A shape environment lets data-dependent ops (nonzero, masked_select) produce fake tensors of
    # unknown size instead of failing; tensors the model creates outside the mode (closures, plain
    # attributes) are converted on first use.
    return FakeTensorMode(allow_non_fake_inputs=True, shape_env=ShapeEnv())


def to_fake(mode: Any, tensor: torch.Tensor, device: str = "cpu") -> torch.Tensor:
    from torch._subclasses.fake_tensor import FakeTensor

    if device == "cpu" and tensor.device.type == "cpu" and not isinstance(tensor, FakeTensor):
        return mode.from_tensor(tensor, static_shapes=True)  # keeps strides and storage sharing
    # Meta tensors, tensors of another fake mode or of another device: only the metadata matters.
    with mode:
        return torch.empty_strided(tensor.shape, tensor.stride(), dtype=tensor.dtype, device=device)


def stand_ins(model: torch.nn.Module, make: Any) -> dict[int, torch.Tensor]:
    """Stand-ins for `model`'s parameters and buffers (``make(tensor)`` each; parameters stay
    parameters, so autograd and the optimizer treat them as the model's), keyed by the id of the tensor
    they stand in for: a parameter shared by two modules (tied embeddings) gets one stand-in."""
    out: dict[int, torch.Tensor] = {}
    for param in model.parameters():
        out[id(param)] = torch.nn.Parameter(make(param.detach()), param.requires_grad)
    for buffer in model.buffers():
        out[id(buffer)] = make(buffer)
    return out


_MISSING = object()


@contextlib.contextmanager
def borrowed(model: torch.nn.Module, tensors: dict[int, torch.Tensor], train: bool) -> Iterator[Any]:
    """`model` itself, with the stand-ins `tensors` in place of its parameters and buffers and in
    `train` mode, for the block; everything is put back after it (the model's values, gradients, modes
    and attributes are never touched). The model is not copied: code that reaches its modules through a
    closure (minGPT's ``self.mlpf = lambda x: m.c_proj(...)``) sees the stand-ins too, which a copy
    would not.

    Each module's own entries are set with setattr, as a user's assignment would be (nn.LSTM keeps its
    ``_flat_weights`` in step that way), once per module however often it is shared; torch's
    ``_reparametrize_module(tie_weights=True)`` leaves a stand-in behind in a module registered under
    two names."""
    # Modules' own attributes, restored after the block: code that caches a tensor on the module
    # (word_language_model's ``self.src_mask = mask``) would otherwise keep one of the trace's.
    modules = list(model.modules())
    saved = [(module, dict(module.__dict__)) for module in modules]
    swapped: list[tuple[torch.nn.Module, str, torch.Tensor]] = []
    try:
        for module in modules:
            for store in (module._parameters, module._buffers):
                for name, value in list(store.items()):
                    if value is not None and id(value) in tensors:
                        swapped.append((module, name, value))
                        setattr(module, name, tensors[id(value)])
        model.train(train)
        yield model
    finally:
        for module, name, value in reversed(swapped):
            setattr(module, name, value)
        for module, before in saved:
            for key in [key for key in module.__dict__ if key not in before]:
                del module.__dict__[key]
            for key, value in before.items():
                if module.__dict__.get(key, _MISSING) is not value:
                    module.__dict__[key] = value


def fake_inputs(inputs: tuple, mode: Any, device: str = "cpu") -> tuple:
    from torch.utils._pytree import tree_map

    return tree_map(lambda v: to_fake(mode, v, device) if isinstance(v, torch.Tensor) else v, inputs)


class DeviceSide:
    """Which calls run on the traced device rather than on the host (host work: an optimizer's step
    counter, inputs sampled with a CPU generator, is never the chip's, and the emulator does not route
    it either).

    On fake tensors the device's tensors live on a device of their own (meta, or the emulated backend;
    host tensors stay fake CPU tensors), so a device call is one that touches such a tensor or creates
    one, and a tensor the code forgot to move fails as it would on the chip. In a real CPU run every tensor is a CPU tensor: the model's
    parameters, buffers and inputs are the device's, and so is whatever is computed from them or
    created by the model's own code (the optimizer's fresh tensors are host state)."""

    def __init__(self, kind: str, seeds: list[torch.Tensor] = ()):  # all | tracked | a device type
        self.kind = kind
        if kind == "tracked":
            from torch.utils.weak import WeakTensorKeyDictionary

            self.tensors = WeakTensorKeyDictionary()
            for tensor in seeds:
                self.tensors[tensor] = True

    def has(self, args: tuple, kwargs: dict, in_optimizer: bool) -> bool:
        if self.kind == "all":
            return True
        seen = False
        for value in (*args, *kwargs.values()):
            for t in value if isinstance(value, (list, tuple)) else (value,):
                if isinstance(t, torch.Tensor):
                    seen = True
                    if t in self.tensors if self.kind == "tracked" else t.device.type == self.kind:
                        return True
        if seen:
            return False
        if self.kind != "tracked":
            device = kwargs.get("device")
            return device is not None and torch.device(device).type == self.kind
        return not in_optimizer  # a factory call of the model's own code

    def mark(self, out: Any) -> None:
        if self.kind != "tracked":
            return
        for t in out if isinstance(out, (list, tuple)) else (out,):
            if isinstance(t, torch.Tensor):
                self.tensors[t] = True


def moved(inputs: tuple, device: str) -> tuple:
    from torch.utils._pytree import tree_map

    return tree_map(lambda v: v.to(device) if isinstance(v, torch.Tensor) else v, inputs)


def leaves(value: Any) -> list[Any]:
    from torch.utils._pytree import tree_leaves

    return tree_leaves(value)
