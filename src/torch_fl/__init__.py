"""torch-fl: a unified device-adaptation layer for PyTorch.

``import torch_fl`` makes ``torch.fl`` available. Model code names devices symbolically::

    import torch, torch_fl
    dev = torch.fl.device()          # FL_DEVICE, else acc0 -> cuda:0 / npu:0 / mps / cpu
    model = MyModel().to(dev)

Submodules that are heavy or rarely needed (runtime facade, CLI, analysis) load on first use.
"""

from __future__ import annotations

import sys
import types
from typing import TYPE_CHECKING, Any

import torch

# device and description are callable modules (below): torch.fl.device() resolves, torch.fl.description("npu")
# loads, and `import torch_fl.device as d` / `import torch_fl.description.registry as r` give the modules.
# routing.current is the one runtime object (light: routing's emulator and installers load on first use).
from . import _imports, _logging, description, device
from ._version import __version__
from .device import backend
from .errors import (
    AOTFingerprintError,
    AOTIntegrityError,
    CacheLockTimeout,
    CacheTrustError,
    CacheUnusableError,
    CollectiveTimeoutError,
    CompareError,
    ConfigError,
    CudaAliasError,
    DescriptionError,
    DeviceNotFoundError,
    DistributedError,
    FallbackWarning,
    ModelSpecError,
    PluginImportError,
    PreflightError,
    RanksMissingError,
    RouteLogError,
    RuntimeUnsupportedError,
    ScanConfigError,
    StreamRaceError,
    TorchFLError,
    TorchVersionError,
    TraceError,
    UnknownDescriptionError,
    UnsupportedOperatorError,
    VendorOpError,
)
from .routing.current import runtime as _runtime
from .routing.current import use_device

if TYPE_CHECKING:
    from .description.model import Description

# Public name -> module that defines it, imported on first access (keeps `import torch_fl` cheap).
_LAZY = {name: "runtime" for name in (
    "is_available", "device_count", "current_device", "set_device", "synchronize", "Stream", "Event",
    "memory_allocated", "max_memory_allocated", "reset_peak_memory_stats", "empty_cache",
    "mem_get_info", "manual_seed", "autocast", "get_device_properties", "dist_backend", "stream",
)} | {name: "routing" for name in (
    "activate", "deactivate", "activated", "emulate", "register_kernel", "route_stats",
    "reset_route_stats", "route_table", "write_route_log",
)} | {name: "compiler" for name in ("compile", "compile_stats", "export_aot", "load_aot")} | {
    "sanitize": "routing.emu.sanitizing", "profile": "analysis.profile"}

# Submodules reached as torch.fl.NAME (torch.fl.distributed), imported on first access like _LAZY.
_SUBMODULES = {"distributed"}


def reset() -> None:
    """Deactivate routing and forget the detected backend, the discovered descriptions and the route tables
    built from them, the process's state in one call (after changing FL_* variables); the next
    ``torch.fl.device()`` activates routing again."""
    _runtime.reset()


def _description(name: str | None = None) -> Description:
    """A device description by name or path; with no name, the description of torch.fl.device().

    Raises:
        UnknownDescriptionError: for a name no description has (with the closest names).

    Example:
        >>> torch.fl.description("cpu").device_type
        'cpu'
    """
    if name:
        from .description.registry import get

        return get(name)
    return device.governing()


class _CallableModule(types.ModuleType):
    """A module that is also torch.fl's function of the same name: `import torch_fl.device as d` gives the
    module, and torch.fl.device("acc1") calls (a function bound under the module's name would shadow
    the module for ``import ... as``)."""

    _call: Any = None

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return type(self)._call(*args, **kwargs)


def _callable(module: types.ModuleType, function: Any) -> None:
    module.__class__ = type(f"Callable_{module.__name__.rpartition('.')[2]}", (_CallableModule,),
                            {"_call": staticmethod(function)})


_callable(device, use_device)
_callable(description, _description)


def devices() -> list[torch.device]:
    """Every virtual device of this machine in order (acc0, acc1, ...), as real torch.devices."""
    from .device import device_map

    return list(device_map().values())


def device_type(device_id: str | None = None) -> str:
    """The physical device type ('cuda', 'npu', 'cpu', ...) of `device_id` (default: torch.fl.device())."""
    return device(device_id).type


def is_accelerator(device_id: str | int | torch.device | None = None) -> bool:
    """Whether a device is an accelerator rather than the host CPU.

    With no argument: torch.fl.device(), so False on a CPU-only host and True on CUDA, NPU, MLU, XPU, MPS
    and emulated accelerators. With a device, a device string or a device type (``"cuda"``, ``"cuda:1"``,
    ``"npu"``, ``"cpu"``, a tensor's ``.device``): whether that one is, without needing it to be present,
    so ``torch.fl.is_accelerator(x.device.type)`` is False for a CPU tensor on any machine. Virtual ids
    (``"acc0"``) and integers resolve through the device map.

    This is what CUDA-era code means by ``torch.cuda.is_available()`` and ``device_type == "cuda"``;
    ``torchfl fix`` rewrites those to it, so a CPU run keeps its CPU behaviour.
    """
    if isinstance(device_id, torch.device):
        found = device_id
    elif isinstance(device_id, str):
        try:
            found = torch.device(device_id)  # "cuda", "cuda:1", "mps", "cpu": no lookup needed
        except RuntimeError:
            try:
                found = device(device_id)  # "acc0", a description name
            except DeviceNotFoundError:
                # A device type this torch build does not know yet ("npu" before torch_npu loads).
                return device_id.split(":")[0] not in ("cpu", "meta")
    else:
        found = device(device_id)
    return found.type not in ("cpu", "meta")


def descriptions() -> dict[str, Description]:
    """Every known description (built-ins, entry points, FL_DESCRIPTION_PATH, FL_DESCRIPTION)."""
    from .description import registry

    return dict(registry.descriptions())


__getattr__ = _imports.lazy_getattr(globals(), _LAZY, _SUBMODULES, shown="torch.fl")


def __dir__() -> list[str]:
    # The public surface only: not this module's own imports (sys, torch, typing names).
    return sorted(set(__all__) | _SUBMODULES)


__all__ = [
    "AOTFingerprintError", "AOTIntegrityError", "CacheLockTimeout", "CacheTrustError",
    "CacheUnusableError",
    "CollectiveTimeoutError", "CompareError", "ConfigError", "CudaAliasError", "DescriptionError",
    "DeviceNotFoundError", "DistributedError", "FallbackWarning", "ModelSpecError", "PluginImportError",
    "PreflightError", "RanksMissingError", "RouteLogError", "RuntimeUnsupportedError", "ScanConfigError", "StreamRaceError",
    "TorchFLError",
    "TorchVersionError", "TraceError", "UnknownDescriptionError", "UnsupportedOperatorError",
    "VendorOpError", "__version__", "backend", "description", "descriptions", "device",
    "device_type", "devices", "is_accelerator", "reset", *sorted(_LAZY),
]

class _SubmoduleAlias:
    """``import torch.fl.distributed`` is ``import torch_fl.distributed``: the same module object, never a
    second copy. Without this, Python found the submodule through torch_fl's ``__path__`` and executed it
    again as ``torch.fl.distributed``, whose relative imports then loaded ``torch.fl.device``,
    ``torch.fl.errors``, ... a second torch-fl whose state and exception classes differ from the first
    (``init_process_group`` failed on it)."""

    _PREFIX = "torch.fl."

    def find_spec(self, name: str, path: object = None, target: object = None) -> object:
        if not name.startswith(self._PREFIX):
            return None
        import importlib.util

        return importlib.util.spec_from_loader(name, self)

    def create_module(self, spec: object) -> object:
        import importlib

        module = importlib.import_module(__name__ + "." + spec.name[len(self._PREFIX):])  # type: ignore[attr-defined]
        self._specs[spec.name] = module.__spec__  # type: ignore[attr-defined]
        return module

    def exec_module(self, module: object) -> None:
        # the import system has just set the alias's spec on the real module: give it its own back
        module.__spec__ = self._specs.pop(module.__spec__.name, module.__spec__)  # type: ignore[attr-defined]

    _specs: dict[str, object] = {}  # noqa: RUF012  (alias name -> the module's own spec, during one import)


_logging.configure()
# torch.fl is this module (never a PrivateUse1 rename: vendor plugins own that slot).
torch.fl = sys.modules[__name__]  # type: ignore[attr-defined]
sys.modules.setdefault("torch.fl", sys.modules[__name__])
_imports.provide("torch.fl", _SubmoduleAlias())  # torch-fl's one import hook answers torch.fl.X
try:
    _runtime.register_early()  # FL_DEVICE=emu:NAME: the emulated device exists before the first backward
except ConfigError:
    pass  # a bad FL_EMU_DEVICES is reported, with its fix, at the first torch.fl.device() call
