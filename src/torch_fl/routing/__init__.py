"""Level-1 dispatch: every aten operator on a device gets a route.

Activation happens on the first device resolution or on ``torch.fl.activate()``: for a real device,
routers are registered on its dispatch key for the ops whose route is not plain native; for an emulated
chip (``FL_DEVICE=emu:NAME`` or ``torch.fl.emulate(NAME)``) the emulated device ``emu:N`` (emu/)
checks its own tensors against the description, and where that device cannot exist a dispatch mode
checks the CPU (emu/mode.py). ``torch.fl.deactivate()`` restores the dispatcher exactly.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch

from .. import _env
from ..description.model import Description
from ..description.probe import canonical_op_name
from .stats import reset_route_stats, route_log, route_stats, routed_seconds, write_route_log
from .table import ROUTES, KernelEntry, Route, RouteTable, current_overrides

if TYPE_CHECKING:
    from ..device import ResolvedDevice

__all__ = [
    "ROUTES", "Activation", "KernelHandle", "Route", "RouteTable", "activate", "activated", "active",
    "deactivate", "emulate", "register_kernel", "registered_kernels", "reset_route_stats", "route_log",
    "route_stats", "route_table", "routed_seconds", "suspended", "write_route_log",
]

_lock = threading.RLock()
_kernels: dict[str, list[KernelEntry]] = {}


@dataclass
class Activation:
    """What is installed: the route table, where, and how to undo it."""

    table: RouteTable
    device: torch.device
    emulated: bool
    installation: Any

    @property
    def description(self):
        return self.table.description


_active: list[Activation] = []  # a stack: emulate() can nest over an activated device

# The route tables of past activations, by description (identity) and the user's overrides: a table
# memoises its decisions, so entering emulate() again around each step (or each test) decides each op
# once, not once per entry. register_kernel and KernelHandle.remove empty it (a kernel changes routes).
_tables: dict[tuple[int, tuple], tuple[Description, RouteTable]] = {}


def _table(desc: Description) -> RouteTable:
    overrides = current_overrides()  # read each time: FL_ROUTE or a config's [routes] may have changed
    key = (id(desc), overrides.key())
    found = _tables.get(key)
    if found is None or found[0] is not desc:
        if len(_tables) >= 64:  # (descriptions loaded from many paths in one process: keep it bounded)
            _tables.clear()
        found = _tables[key] = (desc, RouteTable(desc, _kernels, overrides))
    return found[1]


def active() -> Activation | None:
    """The innermost activation, or None."""
    return _active[-1] if _active else None


def route_table(description: str | Description | None = None) -> RouteTable:
    """The route table of a description (a Description, a name, a path, emu:NAME or a device id such as
    acc1; default: the active one, else torch.fl.device()'s). Activates nothing."""
    from ..device import governing

    if description is None and _active:
        return _active[-1].table
    if isinstance(description, Description):
        return RouteTable(description, _kernels)
    return RouteTable(governing(description), _kernels)


def _activate(desc, device: torch.device, emulated: bool) -> Activation:
    from . import stats
    from .router import Router

    table = _table(desc)
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
    log_path = _env.FL_ROUTE_LOG.value()  # its folder is checked now, so the log is not lost at exit
    if log_path is not None:
        stats.write_at_exit(str(log_path))
    activation = Activation(table, device, emulated, installation)
    _active.append(activation)
    return activation


def activate(device: str | torch.device | ResolvedDevice | None = None) -> Activation:
    """Install routing for `device` (a spec or a resolved device; default torch.fl.device());
    idempotent and thread-safe.

    Example:
        >>> import torch, torch_fl
        >>> torch.fl.activate().description.name  # doctest: +SKIP
        'cpu'
    """
    from ..device import ResolvedDevice, resolve_spec

    with _lock:
        resolved = device if isinstance(device, ResolvedDevice) else resolve_spec(device)
        desc, emulated = resolved.description, resolved.emulated
        for current in _active:
            if current.description.name == desc.name and current.emulated == emulated:
                return current
        return _activate(desc, resolved.device, emulated)


def deactivate() -> None:
    """Remove every installed router and emulation; the dispatcher is as before activation."""
    _unwind(0)


def _unwind(depth: int) -> None:
    """Remove activations (innermost first) until `depth` remain."""
    with _lock:
        while len(_active) > depth:
            _active.pop().installation.remove()


@contextlib.contextmanager
def activated(device: str | torch.device | None = None) -> Iterator[Activation]:
    """Routing active inside the block only (unless it was already active before)."""
    before = len(_active)
    activation = activate(device)
    try:
        yield activation
    finally:
        _unwind(before)


@contextlib.contextmanager
def suspended() -> Iterator[None]:
    """Plain PyTorch inside the block (no routers, no emulation); routing is restored after it.
    For host-side work next to an emulated chip: building reference inputs, CPU reference results."""
    with _lock:
        saved = [(a.description, a.device, a.emulated) for a in _active]
        deactivate()
    try:
        yield
    finally:
        with _lock:
            for desc, device, emulated in saved:
                _activate(desc, device, emulated)


@contextlib.contextmanager
def emulate(name: str, *, host: bool = False) -> Iterator[Activation]:
    """Run the block as if on the chip described by `name` (a description name or path): its device is
    ``activation.device`` (``emu:0``), checked against the description; host tensors are not checked.

    Args:
        name: a description name or path, with or without ``emu:``.
        host: use the dispatch-mode emulator instead: the device is the CPU and every CPU op in the
            block is checked (host work included). It is what runs when a vendor plugin owns
            PrivateUse1, and what route checks on host tensors use (scripts/opinfo_routes.py).

    Example:
        >>> with torch.fl.emulate("mps") as chip:  # doctest: +SKIP
        ...     model.to(chip.device)(x.to(chip.device))  # float64 raises, missing ops translate
    """
    from ..description import registry
    from ..device import EMULATION_PREFIX, resolve_spec

    spec = name if name.startswith(EMULATION_PREFIX) else EMULATION_PREFIX + name
    if host:
        desc, device = registry.get(spec[len(EMULATION_PREFIX):]), torch.device("cpu")
    else:
        resolved = resolve_spec(spec)
        desc, device = resolved.description, resolved.device
    with _lock:
        before = len(_active)
        activation = _activate(desc, device, True)
    try:
        yield activation
    finally:
        _unwind(before)


def registered_kernels() -> dict[str, list[KernelEntry]]:
    """Kernels registered with register_kernel, by op (shared with every RouteTable built here)."""
    return _kernels


class KernelHandle:
    """Undo handle of register_kernel."""

    def __init__(self, op: str, entry: KernelEntry):
        self.op, self.entry = op, entry

    def remove(self) -> None:
        with _lock:
            entries = _kernels.get(self.op, [])
            if self.entry in entries:
                entries.remove(self.entry)
            _refresh()


def register_kernel(op: str, fn: Callable, *, device_type: str | None = None,
                    dtypes: Iterable[str | torch.dtype] | None = None) -> KernelHandle:
    """Route `op` to `fn` (a vendor or Triton kernel) for `device_type` and `dtypes`.

    Args:
        op: 'aten::gelu' (every overload) or 'aten::gelu.default'.
        fn: called with the op's arguments; returns what the op returns.
        device_type: only for this device type (default: every device).
        dtypes: only for inputs of these dtypes (default: every dtype).

    Returns:
        A handle whose ``remove()`` undoes the registration.

    Example:
        >>> h = torch.fl.register_kernel("aten::gelu", my_gelu, dtypes=["float16"])  # doctest: +SKIP
        >>> h.remove()  # doctest: +SKIP
    """
    name = op if "::" in op else f"aten::{op}"
    key = name if "." not in name.split("::", 1)[1] else canonical_op_name(name)
    names = None if dtypes is None else frozenset(
        str(d).removeprefix("torch.") if isinstance(d, torch.dtype) else d for d in dtypes)
    entry = KernelEntry(fn, names, f"torch.fl.register_kernel({key!r}"
                        + (f", device_type={device_type!r}" if device_type else "") + ")", device_type)
    with _lock:
        _kernels.setdefault(key, []).append(entry)
        _refresh()
    return KernelHandle(key, entry)


def _refresh() -> None:
    """Re-install active routing so new or removed kernels take effect."""
    _tables.clear()
    if not _active:
        return
    specs = [(a.description, a.device, a.emulated) for a in _active]
    deactivate()
    for desc, device, emulated in specs:
        _activate(desc, device, emulated)
