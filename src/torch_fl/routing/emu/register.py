"""Registering the emulated backend: PrivateUse1 borrowed (once per process) with the backend module,
hooks, device guard, factories, serialization, generator and autocast of this package."""

from __future__ import annotations

import threading
from typing import Any

import torch

from ..._state import process
from . import (
    accel_memory,
    attention,
    autocast,
    compiled,
    composites,
    dist,
    dlpack,
    engine,
    events,
    factories,
    generator,
    hub_kernels,
    lazy,
    module,
    moves,
    plugin,
    profiling,
    sanitizing,
    serialization,
    storage,
    stream_copies,
    streams,
    vendor,
)
from .slot import backend_name, borrowed, state
from .tensor import never_traced

_lock = threading.Lock()


def ensure(count: int, chip: Any = None) -> bool:
    """Register the ``emu`` backend (once: PyTorch cannot unregister a backend) with `count` devices
    (FL_EMU_DEVICES; a later call sets the count again). The first registration names the slot after
    `chip` (the emulated description) where that chip is a PrivateUse1 plugin's (vendor.py). Returns
    whether anything changed (False: registered, checked and counted already, as torch.fl.device() finds
    it on every call after the first)."""
    with _lock:
        if state.count == count and state.probed:
            return False
        if not borrowed():
            from torch.utils.backend_registration import _setup_privateuseone_for_python_backend

            state.name = vendor.emulated_name(chip)
            process.emulated_type = backend_name()  # device.is_emulated reads it
            vendor.announce(chip, backend_name())
            _setup_privateuseone_for_python_backend(backend_name(), backend_module=vendor.backend_module(state.name),
                                                    hook=module._make_hook(), device_guard=module._make_guard())
            factories._register_factories()
            serialization._register_serialization()
            storage.install()  # torch.UntypedStorage(n, device=emu): host memory, not PrivateUse1's allocator
            dlpack.install()  # to_dlpack/from_dlpack of device tensors, as torch_npu replaces them
            accel_memory.install()  # torch.accelerator.memory_*: the emulator's counts, not a C++ allocator's
            moves.install()  # module.to(emu) of parameters a live host autograd graph still holds
            generator._register_generator()
            events.register()  # torch.Event(device=emu): the device module's event (a Python guard has none)
            streams.install()  # streams, events and non-blocking copies in the chip's order (streams.py)
            stream_copies.install()  # non-blocking copies, record_stream, pinned factories
            sanitizing.enable_from_env()  # FL_SANITIZE=streams
            engine.install()  # backward across emulated devices (engine.py: PyTorch's engine knows one)
            lazy.register()
            attention.register()  # scaled_dot_product_attention's fused path where the chip has one
            composites.register()  # silu_backward & co.: the chip's kernel where it has one
            autocast.register(backend_name())
            compiled.register()  # torch.compile: Inductor refused (it would compile for the host)
            hub_kernels.install(backend_name())  # HF hub kernels: binaries for the real chip, off here
            profiling.install()  # profile(use_device=emu): Kineto's trace (no C++ event stubs to time with)
            # the c10d backend of the emulated type (init_process_group(device_id=emu:N)), and under the
            # chip's own name where the chip is emulated as itself (vendor code's "hccl")
            dist.register(chip.collective_backend if state.name != vendor.EMU and chip is not None else None)
            if state.name != vendor.EMU and chip is not None:
                plugin.install(chip, state.name)  # `import torch_npu` answered by the emulated plugin
            state.on_first_tensor = first_device_tensor
        state.count = count
        state.live += [0] * max(0, count - len(state.live))
        state.peak += [0] * max(0, count - len(state.peak))
        if not state.probed and not state.probe_pending:
            # (while torch itself imports, under the torch.backends autoload hook, no backward can have
            # run yet, so the engine will know the device; and a backward now would deadlock on the
            # import lock.) Otherwise the check waits for the device's first use (slot.check_autograd):
            # a backward on the device imports DTensor and sympy (~0.8 s), which `import torch_fl` must
            # not pay, and its answer was fixed when the device was registered, here.
            if _torch_importing():
                state.probed = True
            else:
                state.probe_pending = True
    return True


_rules: list[torch.library.Library] = []  # the dispatch rules' registrations (kept for the process)


def first_device_tensor() -> None:
    """The process's first device tensor (tensor.py / factories.py call `state.on_first_tensor` once):
    the tensor type's dispatch rules, then the routing activation FL_DEVICE asked for, if pending."""
    state.on_first_tensor = None
    register_dispatch_rules()
    activate, state.activate_at_first_tensor = state.activate_at_first_tensor, None
    if activate is not None:
        activate()


def register_dispatch_rules() -> None:
    """Register the device tensor's own ``__torch_dispatch__`` as its dispatch rule for every operator that
    can reach it (torch.library.register_torch_dispatch). PyTorch's C++ asks a wrapper subclass's
    registered rule first and otherwise checks whether the tensor is a DTensor (``is_dtensor`` in
    torch/csrc/utils/python_arg_parser.cpp), and that check imports torch.distributed.tensor and sympy
    (519 modules, ~0.5 s) at the first op; a rule skips the check, and the call is the same. ~40 ms, once,
    at the first device tensor rather than at registration (``import torch_fl`` registers the device
    under FL_DEVICE=emu:NAME). CompositeImplicitAutograd ops never reach a subclass (they decompose
    above it); an operator defined later (an extension's) still takes PyTorch's check."""
    if _rules:
        return
    kind = state.tensor_type
    has_kernel = torch._C._dispatch_has_kernel_for_dispatch_key
    libraries: dict[str, torch.library.Library] = {}
    for name in torch._C._dispatch_get_all_op_names():
        namespace, _, op = name.partition("::")
        if not op or has_kernel(name, "CompositeImplicitAutograd"):
            continue
        library = libraries.get(namespace)
        if library is None:
            library = libraries[namespace] = torch.library.Library(namespace, "FRAGMENT")
        torch.library.register_torch_dispatch(name, kind, _rule, lib=library)
    _rules.extend(libraries.values())


def _rule(cls: type, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
    # the class's __torch_dispatch__ as it is at the call, not as it was at registration: a child forked
    # under the stream sanitizer replaces it with the vendor's refusal (streams.py)
    return cls.__torch_dispatch__(func, types, args, kwargs)


never_traced(_rule.__code__)  # (as the dispatch itself: Dynamo runs it as it is)


def _torch_importing() -> bool:
    return bool(getattr(getattr(torch, "__spec__", None), "_initializing", False))
