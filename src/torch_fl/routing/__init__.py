"""Level-1 dispatch: every aten operator on a device gets a route.

Activation happens at the first ``torch.fl.device()`` (routing/current.py, the runtime object) or on
``torch.fl.activate()``: for a real device,
routers are registered on its dispatch key for the ops whose route is not plain native; for an emulated
chip (``FL_DEVICE=emu:NAME`` or ``torch.fl.emulate(NAME)``) the emulated device ``emu:N`` (emu/)
checks its own tensors against the description, and where that device cannot exist a dispatch mode
checks the CPU (emu/mode.py). ``torch.fl.deactivate()`` restores the dispatcher exactly.

The functions here take device specs (``acc0``, ``emu:mps``, a description name) and resolve them
through the device layer; the activation stack itself (activation.py) takes resolved devices only, so
the device layer can activate routing without routing resolving back through it.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING

import torch

from .._names import EMULATION_PREFIX
from .._opnames import canonical_op_name
from ..description.model import Description
from . import activation
from .activation import Activation, active, deactivate
from .stats import reset_route_stats, route_log, route_stats, routed_seconds, write_route_log
from .table import ROUTES, KernelEntry, Route, RouteTable

if TYPE_CHECKING:
    from ..device import ResolvedDevice

__all__ = [
    "ROUTES", "Activation", "KernelHandle", "Route", "RouteTable", "activate", "activated", "active",
    "deactivate", "emulate", "register_kernel", "registered_kernels", "reset_route_stats", "route_log",
    "route_stats", "route_table", "routed_seconds", "suspended", "write_route_log",
]


def route_table(description: str | Description | None = None) -> RouteTable:
    """The route table of a description (a Description, a name, a path, emu:NAME or a device id such as
    acc1; default: the active one, else torch.fl.device()'s). Activates nothing."""
    from ..device import governing

    current = active()
    if description is None and current is not None:
        return current.table
    if isinstance(description, Description):
        return RouteTable(description, activation.kernels)
    return RouteTable(governing(description), activation.kernels)


def activate(device: str | torch.device | ResolvedDevice | None = None) -> Activation:
    """Install routing for `device` (a spec or a resolved device; default torch.fl.device());
    idempotent and thread-safe.

    Example:
        >>> import torch, torch_fl
        >>> torch.fl.activate().description.name  # doctest: +SKIP
        'cpu'
    """
    from ..device import ResolvedDevice, resolve_spec

    with activation.lock:
        return activation.activate_resolved(device if isinstance(device, ResolvedDevice) else resolve_spec(device))


@contextlib.contextmanager
def activated(device: str | torch.device | None = None) -> Iterator[Activation]:
    """Routing active inside the block only (unless it was already active before)."""
    before = len(activation.stack)
    current = activate(device)
    try:
        yield current
    finally:
        activation.unwind(before)


@contextlib.contextmanager
def suspended() -> Iterator[None]:
    """Plain PyTorch inside the block (no routers, no emulation); routing is restored after it.
    For host-side work next to an emulated chip: building reference inputs, CPU reference results."""
    with activation.lock:
        specs = activation.saved()
        deactivate()
    try:
        yield
    finally:
        activation.restore(specs)


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
    from ..device import resolve_spec

    spec = name if name.startswith(EMULATION_PREFIX) else EMULATION_PREFIX + name
    if host:
        desc, device = registry.get(spec[len(EMULATION_PREFIX):]), torch.device("cpu")
    else:
        resolved = resolve_spec(spec)
        desc, device = resolved.description, resolved.device
    with activation.lock:
        before = len(activation.stack)
        installed = activation.install(desc, device, True)
    try:
        yield installed
    finally:
        activation.unwind(before)


def registered_kernels() -> dict[str, list[KernelEntry]]:
    """Kernels registered with register_kernel, by op (shared with every RouteTable built here)."""
    return activation.kernels


class KernelHandle:
    """Undo handle of register_kernel."""

    def __init__(self, op: str, entry: KernelEntry):
        self.op, self.entry = op, entry

    def remove(self) -> None:
        activation.remove_kernel(self.op, self.entry)


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
    activation.add_kernel(key, entry)
    return KernelHandle(key, entry)
