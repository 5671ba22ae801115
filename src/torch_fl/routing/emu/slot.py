"""The backend slot: PyTorch's PrivateUse1 borrowed as a Python backend, and the state of the
emulated devices (how many, which description checks them, memory and transfer counters).

Every module of the emulator asks `backend_name()` for the device type of its tensors: it is the one
place that says what the borrowed slot is called.
"""

from __future__ import annotations

import threading
from typing import Any

import torch

from ..._names import EMULATED_TYPE
from ..._state import process
from ..table import Route

_DEFAULT_NAME = "privateuseone"


def backend_name() -> str:
    """The torch device type of emulated tensors (the name PrivateUse1 is borrowed as): 'emu', or a
    PrivateUse1 plugin chip's own name (npu, mlu, musa) when the first registration emulated it (vendor.py)."""
    return state.name or EMULATED_TYPE


class _State:
    """What the emulated devices are: how many, the router that checks them (None: unchecked),
    the per-device memory accounting and the transfer counters."""

    def __init__(self) -> None:
        self.count = 0                 # devices registered (0: the backend is not set up)
        self.name = ""                 # the slot's name once registered ('' = 'emu'; vendor.emulated_name)
        self.router: Any = None        # routing.router.Router of the emulated description, or None
        self.table: Any = None
        self.dtypes: frozenset[str] = frozenset()
        self.torch_dtypes: frozenset[torch.dtype] = frozenset()
        self.real_dtypes: frozenset[torch.dtype] = frozenset()  # torch_dtypes less complex (fast path)
        self.description: Any = None   # the description governing emu devices (even when inactive)
        self.routes: dict[tuple[Any, str | None], Route] = {}
        self.names: dict[Any, str] = {}
        self.current = 0
        self.live = [0]                # live bytes per device
        self.peak = [0]
        self.h2d_bytes = self.h2d_calls = self.d2h_bytes = self.d2h_calls = self.syncs = 0
        self.steps = 0                 # optimizer steps since the counters were reset (memory.count_steps)
        self.broken = ""               # why the registered backend cannot be used (autograd probe)
        self.tensor_type: Any = None   # EmuTensor (tensor.py sets it; this module is below it)
        self.probed = False
        self.probe_pending = False     # registered, autograd not checked yet (check_autograd)
        # Called once, at the first device tensor (tensor.py and factories.py call it): registration sets
        # it (register.first_device_tensor), which runs `activate_at_first_tensor` after its own work.
        self.on_first_tensor: Any = None
        # Set when FL_DEVICE names the emulated chip but nothing has activated its routing yet (code that
        # calls .npu() and never torch.fl.device()): the first device tensor activates it (current.py).
        self.activate_at_first_tensor: Any = None


state = _State()
process.emulated = state  # (the process's state holds it: torch_fl/_state.py)


def owner() -> str:
    """The backend name PrivateUse1 carries now ('privateuseone' when nobody renamed it)."""
    return torch._C._get_privateuse1_backend_name()


def borrowed() -> bool:
    """Whether torch-fl has registered the ``emu`` backend in this process."""
    return state.count > 0


def available(check: bool = True) -> bool:
    """Whether ``emu`` can be (or already is) a device: PrivateUse1 is free or already ours, this
    torch has the Python-backend hooks, and autograd can run on it (see `unavailable_reason`)."""
    return not unavailable_reason(check)


def check_autograd() -> None:
    """PyTorch's autograd engine sizes its per-device queues once, at the first backward pass of the
    process; a backend registered after that cannot run backward. One tiny backward tells (once, at the
    device's first use: registration leaves it pending)."""
    if not state.probe_pending:
        return
    state.probe_pending, state.probed = False, True
    failed: list[BaseException] = []

    def probe() -> None:
        try:
            leaf = torch.ones(1, device=device(0), requires_grad=True)
            (leaf * 2).sum().backward()
        except BaseException as exc:  # (handed to the calling thread)
            failed.append(exc)

    if torch._C._dispatch_tls_is_dispatch_key_excluded(torch._C.DispatchKey.AutogradOther):
        # The first use is a kernel of the device (its first factory call), where this thread's dispatch
        # state excludes autograd and a backward cannot run: a thread of its own (no lock of torch-fl is
        # held there). Elsewhere inline, since the caller may hold the activation lock the probe needs.
        worker = threading.Thread(target=probe, name="torch-fl-emu-autograd-check")
        worker.start()
        worker.join()
    else:
        probe()
    if failed:
        exc = failed[0]
        if not isinstance(exc, RuntimeError) or "device_ready_queues_" not in str(exc):
            raise exc
        state.broken = ("a backward pass ran in this process before the emulated device was registered, "
                        "and PyTorch's autograd engine fixes its devices at the first backward. Set "
                        "FL_DEVICE=emu:NAME in the environment (torch-fl then registers the device at "
                        "import), or resolve the emulated device before any backward")


def unavailable_reason(check: bool = True) -> str:
    """Why ``emu`` cannot be a device in this process ('' when it can). `check`: run the pending
    autograd check first (False: what is known without a backward, for registration at import)."""
    if state.count > 0 and state.probed and not state.broken:
        return ""  # registered and checked: nothing below can change (torch.fl.device() asks every call)
    from torch.utils import backend_registration

    if check:
        check_autograd()
    if state.broken:
        return state.broken
    if owner() not in (_DEFAULT_NAME, backend_name()) or _vendor_kernels():
        return (f"PyTorch's PrivateUse1 slot belongs to '{owner()}' (a vendor plugin), and a process has "
                f"one PrivateUse1 backend")
    if not hasattr(backend_registration, "_setup_privateuseone_for_python_backend"):
        return f"torch {torch.__version__} has no Python backend hooks (torch >= 2.5 has)"
    return ""


def _vendor_kernels() -> bool:
    """A C++ plugin that registered PrivateUse1 kernels without renaming the slot still owns it."""
    if borrowed():
        return False
    return torch._C._dispatch_has_kernel_for_dispatch_key("aten::empty.memory_format", "PrivateUse1")


def status() -> dict[str, Any]:
    """Which emulator this process uses, for `torchfl doctor`: the emulated device ('device': PrivateUse1
    borrowed as 'emu'), the dispatch-mode fallback ('dispatch mode', and why), or none."""
    emulating = state.router is not None or state.count > 0
    reason = unavailable_reason()
    if state.count and not reason:
        kind = "device"
        name = backend_name()
        detail = (f"PyTorch's PrivateUse1 slot is borrowed as '{name}' ({state.count} device(s): "
                  + ", ".join(f"{name}:{i}" for i in range(state.count)) + "); host tensors are never checked")
    elif reason:
        kind = "dispatch mode"
        detail = f"the emulated device is unavailable because {reason}; every CPU op of an emulated block is checked"
    else:
        kind, detail = "", "no emulated chip in this process"
    return {"active": emulating, "emulator": kind, "privateuse1": owner(), "borrowed": borrowed(),
            "devices": state.count, "chip": getattr(state.description, "name", ""), "detail": detail}


def device(index: int = 0) -> torch.device:
    return torch.device(backend_name(), index)


_listed: tuple[tuple[str, int], list[torch.device]] = (("", 0), [])  # devices() by (name, count)


def devices() -> list[torch.device]:
    """The registered emulated devices (emu:0..emu:N-1; none before the backend is registered)."""
    global _listed
    key, found = _listed
    if key != (state.name, state.count):  # (torch.fl.device() asks on every call: made once, copied)
        found = [device(i) for i in range(state.count)]
        _listed = ((state.name, state.count), found)
    return list(found)


def chip() -> Any:
    """The description that governs the emulated devices: the active emulation's, else the last one's
    (tensors made under it stay its); None before any."""
    return state.description


def set_router(router: Any) -> None:
    """Check emulated devices against `router`'s description (None: run them unchecked)."""
    state.router = router
    # the table's own dispatch-keyed decisions: a table re-entered keeps them (and the fast path's
    # per-op copies, which follow this dict's identity)
    state.routes = router.table.dispatch_routes if router is not None else {}
    if router is not None:
        state.table = router.table
        state.description = router.table.description
        state.dtypes = frozenset(router.table.description.dtypes)
        state.torch_dtypes = frozenset(getattr(torch, n) for n in state.dtypes if hasattr(torch, n))
        state.real_dtypes = frozenset(d for d in state.torch_dtypes if not d.is_complex)
        # torch.autocast("emu") without dtype= takes the chip's dtype, as autocast on the real chip would
        torch.set_autocast_dtype(backend_name(), getattr(torch, router.table.description.autocast_dtype))
    else:
        state.table = None
    _foreach_as_on(state.description if router is not None else None)


def takes_foreach(desc: Any) -> bool:
    """Whether PyTorch's optimizers, zero_grad and clip_grad_norm_ take their foreach (multi-tensor) path
    by default on the real chip `desc`: its device type is in PyTorch's own list (cuda, xpu, mtia and the
    PrivateUse1 backend of the process, which is the chip's on a plugin chip's host; not mps, not cpu)."""
    from torch.utils._foreach_utils import _get_foreach_kernels_supported_devices

    listed = set(_get_foreach_kernels_supported_devices()) - {owner()}  # (owner(): the slot borrowed here)
    return desc.device_type in listed or desc.dispatch_key == "PrivateUse1"


def _foreach_as_on(desc: Any) -> None:
    """PyTorch decides the foreach path by device type (the borrowed slot's is always listed) and by
    tensor type (an EmuTensor is not, unless listed): list it exactly while a chip that takes the path
    is emulated, so the emulator runs the ops the chip would run (_foreach_* there, the per-tensor loop
    on mps) and not ten times the calls. PyTorch's DTensor lists itself in the same two lists."""
    from torch.optim import optimizer
    from torch.utils import _foreach_utils

    kind = state.tensor_type
    if kind is None:
        return
    wanted = desc is not None and takes_foreach(desc)
    for supported in (optimizer._foreach_supported_types, _foreach_utils._foreach_supported_types):
        if wanted and kind not in supported:
            supported.append(kind)
        elif not wanted and kind in supported:
            supported.remove(kind)


class DeviceEmulation:
    """An activation of emulated devices: their router; `remove()` restores the previous one (nesting)."""

    def __init__(self, router: Any) -> None:
        self.router = router
        self._previous: Any = None

    def install(self) -> DeviceEmulation:
        self._previous = state.router
        set_router(self.router)
        return self

    def remove(self) -> None:
        set_router(self._previous)



def _no_device(index: int) -> RuntimeError:
    return RuntimeError(
        f"{backend_name()}:{index} does not exist: {state.count} emulated device(s) ({backend_name()}:0.."
        f"{backend_name()}:{state.count - 1}). "
        f"Set FL_EMU_DEVICES={index + 1} for more.")
