"""Registering the emulated backend: PrivateUse1 borrowed (once per process) with the backend module,
hooks, device guard, factories, serialization, generator and autocast of this package."""

from __future__ import annotations

import threading
from typing import Any

import torch

from . import (
    attention,
    autocast,
    compiled,
    dist,
    factories,
    generator,
    lazy,
    module,
    moves,
    plugin,
    serialization,
    storage,
    vendor,
)
from .slot import backend_name, borrowed, device, state

_lock = threading.Lock()


def ensure(count: int, chip: Any = None) -> None:
    """Register the ``emu`` backend (once: PyTorch cannot unregister a backend) with `count` devices
    (FL_EMU_DEVICES; a later call sets the count again). The first registration names the slot after
    `chip` (the emulated description) where that chip is a PrivateUse1 plugin's (vendor.py)."""
    with _lock:
        if state.count == count and state.probed:
            return
        if not borrowed():
            from torch.utils.backend_registration import _setup_privateuseone_for_python_backend

            state.name = vendor.emulated_name(chip)
            vendor.announce(chip, backend_name())
            _setup_privateuseone_for_python_backend(backend_name(), backend_module=vendor.backend_module(state.name),
                                                    hook=module._make_hook(), device_guard=module._make_guard())
            factories._register_factories()
            serialization._register_serialization()
            storage.install()  # torch.UntypedStorage(n, device=emu): host memory, not PrivateUse1's allocator
            moves.install()  # module.to(emu) of parameters a live host autograd graph still holds
            generator._register_generator()
            lazy.register()
            attention.register()  # scaled_dot_product_attention's fused path where the chip has one
            autocast.register(backend_name())
            compiled.register()  # torch.compile: Inductor refused (it would compile for the host)
            dist.register()  # the c10d backend of the emulated type (init_process_group(device_id=emu:N))
            if state.name != vendor.EMU and chip is not None:
                plugin.install(chip, state.name)  # `import torch_npu` answered by the emulated plugin
        state.count = count
        state.live += [0] * max(0, count - len(state.live))
        state.peak += [0] * max(0, count - len(state.peak))
        if not state.probed:
            state.probed = True
            # (while torch itself imports, under the torch.backends autoload hook: no backward can have
            # run yet, so the engine will know the device; and a backward now would deadlock on the
            # import lock)
            if not _torch_importing():
                _probe_autograd()


def _torch_importing() -> bool:
    return bool(getattr(getattr(torch, "__spec__", None), "_initializing", False))


def _probe_autograd() -> None:
    """PyTorch's autograd engine sizes its per-device queues once, at the first backward pass of the
    process; a backend registered after that cannot run backward. One tiny backward tells."""
    probe = torch.ones(1, device=device(0), requires_grad=True)
    try:
        (probe * 2).sum().backward()
    except RuntimeError as exc:
        if "device_ready_queues_" not in str(exc):
            raise
        state.broken = ("a backward pass ran in this process before the emulated device was registered, "
                        "and PyTorch's autograd engine fixes its devices at the first backward. Set "
                        "FL_DEVICE=emu:NAME in the environment (torch-fl then registers the device at "
                        "import), or resolve the emulated device before any backward")
