"""The activation stack: which route tables are installed, where, and how to undo them.

Everything here takes what is already resolved (a Description and a torch.device, or a
`ResolvedDevice`): turning a spec such as ``acc0`` or ``emu:mps`` into those is the device layer's job,
and the public functions of ``torch_fl.routing`` and the runtime object (current.py) do it before calling
here.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch

from .. import _env
from .._state import process
from ..description.fallback import vendor_fallback
from ..description.model import Description
from .table import KernelEntry, RouteTable, current_overrides

if TYPE_CHECKING:
    from ..device import ResolvedDevice

lock = threading.RLock()
# The state itself is the process's (torch_fl/_state.py); these names are its parts, never rebound.
kernels: dict[str, list[KernelEntry]] = process.kernels  # torch.fl.register_kernel's, shared with every RouteTable


@dataclass
class Activation:
    """What is installed: the route table, where, and how to undo it."""

    table: RouteTable
    device: torch.device
    emulated: bool
    installation: Any

    @property
    def description(self) -> Description:
        return self.table.description


stack: list[Activation] = process.activations  # emulate() can nest over an activated device; the last is the innermost

# The route tables of past activations, by description (identity) and the user's overrides: a table
# memoises its decisions, so entering emulate() again around each step (or each test) decides each op
# once, not once per entry. A kernel registered or removed empties it (refresh).
_tables: dict[tuple[int, tuple], tuple[Description, RouteTable]] = process.tables


def active() -> Activation | None:
    """The innermost activation, or None."""
    return stack[-1] if stack else None


def table_for(desc: Description) -> RouteTable:
    """The route table of `desc` under the current FL_ROUTE and config [routes] (kept across activations)."""
    overrides = current_overrides()  # read each time: FL_ROUTE or a config's [routes] may have changed
    key = (id(desc), overrides.key(), vendor_fallback(desc).key())  # the vendor's switch may have changed
    found = _tables.get(key)
    if found is None or found[0] is not desc:
        if len(_tables) >= 64:  # (descriptions loaded from many paths in one process: keep it bounded)
            _tables.clear()
        found = _tables[key] = (desc, RouteTable(desc, kernels, overrides))
    return found[1]


def install(desc: Description, device: torch.device, emulated: bool) -> Activation:
    """Install routing of `desc` for `device` (an emulated chip's device, or a real one) on top of the stack."""
    from . import stats
    from .router import Router

    table = table_for(desc)
    # Checked before anything is installed: an error here (its folder is missing) must leave the
    # dispatcher as it was, not a router that no activation on the stack can remove.
    log_path = _env.FL_ROUTE_LOG.value()
    on_device = emulated and device.type != "cpu"  # the emu backend; else the dispatch-mode fallback
    label = f"emu:{desc.name} ({device})" if on_device else \
        f"emu:{desc.name} (on cpu)" if emulated else str(device)
    router = Router(table, label, host_is_device=emulated or device.type == "cpu")
    if on_device:
        from .emu import DeviceEmulation

        installation = DeviceEmulation(router).install()
    elif emulated:
        from .emu.mode import Emulation

        installation = Emulation(router).install()
    else:
        from .install import KeyInstallation

        installation = KeyInstallation(router).install()
    stats.set_context(label, desc.name)
    if log_path is not None:  # (its folder was checked above, so the log is not lost at exit)
        stats.write_at_exit(str(log_path))
    activation = Activation(table, device, emulated, installation)
    stack.append(activation)
    return activation


def activate_resolved(resolved: ResolvedDevice) -> Activation:
    """Install routing for a resolved device unless the same description is already active (idempotent
    and thread-safe); `torch_fl.routing.activate` resolves a spec and calls this."""
    with lock:
        desc, emulated = resolved.description, resolved.emulated
        for current in stack:
            if current.description.name == desc.name and current.emulated == emulated:
                return current
        return install(desc, resolved.device, emulated)


def unwind(depth: int) -> None:
    """Remove activations (innermost first) until `depth` remain."""
    with lock:
        while len(stack) > depth:
            stack.pop().installation.remove()


def deactivate() -> None:
    """Remove every installed router and emulation; the dispatcher is as before activation."""
    unwind(0)


def saved() -> list[tuple[Description, torch.device, bool]]:
    """What is installed, to install again (`restore`) after a suspension or a kernel change."""
    return [(a.description, a.device, a.emulated) for a in stack]


def restore(specs: list[tuple[Description, torch.device, bool]]) -> None:
    with lock:
        for desc, device, emulated in specs:
            install(desc, device, emulated)


def refresh() -> None:
    """Re-install active routing so new or removed kernels take effect."""
    with lock:
        _tables.clear()
        if not stack:
            return
        specs = saved()
        deactivate()
        restore(specs)


def add_kernel(op: str, entry: KernelEntry) -> None:
    with lock:
        kernels.setdefault(op, []).append(entry)
        kernels_changed(op)


def remove_kernel(op: str, entry: KernelEntry) -> None:
    with lock:
        entries = kernels.get(op, [])
        if entry in entries:
            entries.remove(entry)
        kernels_changed(op)


def kernels_changed(op: str) -> None:
    """After a kernel of `op` was registered or removed: every table forgets `op`, and routers on a
    dispatch key are re-installed for its overloads alone (per-op handles). An emulation on the stack
    keeps per-op decisions of its own, so there everything is re-installed (`refresh`)."""
    from .install import KeyInstallation

    if any(not isinstance(a.installation, KeyInstallation) for a in stack):
        refresh()
        return
    tables = {id(t): t for t in [t for _, t in _tables.values()] + [a.table for a in stack]}
    named = tuple({o for table in tables.values() for o in table.forget(op)})
    for a in stack:
        a.installation.refresh_op(op, named)


__all__ = ["Activation", "activate_resolved", "active", "deactivate", "install", "refresh"]
