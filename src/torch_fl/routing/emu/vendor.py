"""An emulated chip under its vendor's name: what torch_npu-style code sees under ``FL_DEVICE=emu:npu``.

A chip whose plugin registers it as PyTorch's PrivateUse1 backend (npu, mlu, musa: a description with a
``plugin`` and ``dispatch_key = "PrivateUse1"``) renames that slot to its device type. The emulator
borrows the same slot, so it can register it under the same name: ``torch.device("npu:0")``,
``Tensor.npu()``, ``x.is_npu`` (PyTorch generates those for the renamed backend) and the backend module
``torch.npu`` with the calls such code makes (``is_available``, ``device_count``, ``synchronize``,
``current_device``, ``set_device``, ``manual_seed``, ``memory_allocated``, ``Stream``, ``Event``).

A chip with a type PyTorch already has (``xpu``, ``cuda``) cannot take the slot's name: it stays ``emu``.
The name is fixed by the first registration of the process (PyTorch cannot rename a backend twice), and
never taken when the real plugin owns the slot (``slot.unavailable_reason``).
"""

from __future__ import annotations

import logging
from typing import Any

import torch

from ..._names import EMULATED_TYPE

EMU = EMULATED_TYPE
_log = logging.getLogger("torch_fl.routing")


def emulated_name(desc: Any) -> str:
    """The device type emulated tensors of chip `desc` get: its own for a PrivateUse1 plugin chip whose
    type PyTorch does not already have, else 'emu'."""
    if desc is None or desc.dispatch_key != "PrivateUse1" or not desc.plugin:
        return EMU
    kind = desc.device_type
    if not kind.isidentifier() or kind == EMU:
        return EMU
    if kind == torch._C._get_privateuse1_backend_name():
        return kind  # already ours (or the plugin's, and then the slot is unavailable anyway)
    try:
        torch.device(kind)
    except RuntimeError:
        return kind  # a type torch does not know: the plugin's own name, free to take
    return EMU  # a built-in torch type (xpu, cuda, privateuseone): the slot cannot be renamed to it


def announce(desc: Any, name: str) -> None:
    """Log, once at registration, under which name and identity chip `desc` is emulated and why; the device
    reports `desc`'s identity from now on (identity.py)."""
    from . import identity

    identity.remember(desc)
    reason = why_emu(desc)
    if reason:
        _log.info("%s; its tensors are on emu:N", reason)
    elif desc is not None:
        _log.info("'%s' is emulated under its own name: tensors on %s:N, torch.%s, Tensor.%s() (the PrivateUse1 "
                  "slot is renamed to '%s' for this process)", desc.name, name, name, name, name)
    if desc is not None:
        _log.info("the emulated device reports itself as the chip does: get_device_name() = '%s'%s (emulated by %s)",
                  desc.device_name, f", SoC {desc.soc_version}" if desc.soc_version >= 0 else "", identity.emulated_by())


def why_emu(desc: Any) -> str:
    """One line for doctor and the logs: why chip `desc` is emulated as 'emu' ('' when it is not)."""
    if desc is None or emulated_name(desc) != EMU:
        return ""
    if desc.dispatch_key == "PrivateUse1":
        return f"'{desc.name}' is emulated as '{EMU}': its device type '{desc.device_type}' is not a plugin name"
    return (f"'{desc.name}' is emulated as '{EMU}': '{desc.device_type}' is a device type built into PyTorch "
            f"({desc.dispatch_key} key), and PyTorch's borrowed PrivateUse1 slot cannot take that name")


def backend_module(name: str) -> Any:
    """The object registered as ``torch.<name>``: the emulator's backend module, with the vendor's
    device-module surface when the slot carries a vendor's name."""
    from .module import Stream, _BackendModule
    from .vendor_module import chip_identity_class, vendor_module_class

    if name == EMU:
        # (torch.emu: a built-in type's chip, emulated as 'emu', still says which chip it is)
        return chip_identity_class(_BackendModule)()

    return vendor_module_class(_BackendModule, name, Stream)()
