"""The vendor's plugin package of an emulated chip: ``import torch_npu`` under ``FL_DEVICE=emu:npu``.

Code written for a PrivateUse1 plugin chip starts with ``import torch_npu`` (``torch_mlu``, ``torch_musa``),
and the libraries that support the chip decide from ``importlib.util.find_spec("torch_npu")`` and
``torch.npu.is_available()`` (transformers' ``is_torch_npu_available``, accelerate's ``is_npu_available``).
While such a chip is emulated under its own name (vendor.py), the plugin's name is answered by a finder
on ``sys.meta_path``: the package is ``torch.npu`` (the emulator's device module, vendor_module.py) as
``torch_npu.npu``, the vendor's fused ops the description names (``emulation.plugin_ops``: npu_ops.py),
and the vendor's migration switches (``emulation.plugin_migration``: ``import
torch_npu.contrib.transfer_to_npu`` turns on torch-fl's CUDA alias, as the vendor's module patches
``torch.cuda`` onto the chip).

Never installed when the real plugin can be imported: the finder is only added when no other finder on
``sys.path`` knows the name, and the emulator never takes the slot's name when a plugin owns it (slot.py).
"""

from __future__ import annotations

import functools
import importlib
import importlib.machinery
import importlib.util
import logging
import sys
import types
from pathlib import Path
from typing import Any

import torch

from ..._imports import provide

_log = logging.getLogger("torch_fl.routing")

# The vendor's migration switch is torch-fl's CUDA alias (migrate/vendor_switch.py), executed under the
# vendor's module name by the import system: a file, not an import, so routing does not depend on migrate.
_MIGRATION_SWITCH = str(Path(__file__).resolve().parents[2] / "migrate" / "vendor_switch.py")

__all__ = ["EmulatedPlugin", "install", "installed"]


class EmulatedPlugin:
    """Meta path finder and loader of one emulated plugin package and its submodules."""

    def __init__(self, desc: Any, device_type: str) -> None:
        self.name = desc.plugin
        self.desc = desc
        self.device_type = device_type
        section = desc.section("emulation")
        self.migration = {f"{self.name}.{sub}" for sub in section.get("plugin_migration", [])}
        self.ops_module = section.get("plugin_ops", "")
        # name -> the object that is that module: the device module (torch_npu.npu is torch.npu, and its amp),
        # and the ops module's own submodules (torch_npu.optim)
        self.objects: dict[str, Any] = {f"{self.name}.{device_type}": lambda: getattr(torch, device_type),
                                        f"{self.name}.{device_type}.amp": lambda: getattr(torch, device_type).amp}
        for sub, target in self._ops_submodules().items():
            self.objects[f"{self.name}.{sub}"] = functools.partial(_reexport, f"{self.name}.{sub}", target)
        # the C extension (torch_npu._C, torch_mlu._MLUC): a module, so `import torch_npu._C` and `from
        # torch_npu._C import _npu_getDevice` work as with the plugin
        self.native = f"{self.name}.{section.get('plugin_native', '_C')}"
        self.objects[self.native] = self._native_module
        self.packages = {self.name} | {name.rsplit(".", 1)[0] for name in (*self.migration, *self.objects)}
        for name in list(self.packages):  # every parent of a migration module is a package too
            while "." in name:
                name = name.rsplit(".", 1)[0]
                self.packages.add(name)

    # importlib's finder protocol ----------------------------------------------------------------------
    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> Any:
        if fullname not in self._modules():
            return None
        if fullname in self.migration:
            # torch-fl's CUDA alias, run under the vendor's module name (its code lives with the alias)
            return importlib.util.spec_from_file_location(fullname, _MIGRATION_SWITCH)
        return importlib.machinery.ModuleSpec(fullname, self, origin=f"torch-fl emulation of {self.name}",
                                              is_package=fullname in self.packages)

    def create_module(self, spec: Any) -> Any:
        made = self.objects.get(spec.name)
        if made is not None:
            return made()  # torch_npu.npu is torch.npu, as the plugin makes it
        return None  # a plain module, filled by exec_module

    def exec_module(self, module: Any) -> None:
        if module.__name__ in self.objects:
            return  # an existing object (the device module, a real module of torch-fl)
        module.__file__ = __file__  # (libraries treat a module without __file__ as a namespace package)
        if module.__name__ == self.name:
            self._fill_package(module)

    # the package ------------------------------------------------------------------------------------
    def _modules(self) -> set[str]:
        return {*self.packages, *self.migration, *self.objects}

    def _ops_submodules(self) -> dict[str, str]:
        if not self.ops_module:
            return {}
        return dict(getattr(importlib.import_module(f"{__package__}.{self.ops_module}"), "PLUGIN_SUBMODULES", {}))

    def _fill_package(self, module: types.ModuleType) -> None:
        from ..._version import __version__ as fl_version

        # (marked first: the version below reads the op table, which must not take this for the plugin)
        module.__torch_fl_emulation__ = f"torch-fl {fl_version}: '{self.desc.name}' emulated on the CPU"
        module.__version__ = plugin_version(self.desc)
        module.__path__ = []
        setattr(module, self.device_type, getattr(torch, self.device_type))
        if self.desc.section("emulation").get("plugin_is_device_module", False):
            _delegate(module, getattr(torch, self.device_type))
        setattr(module, self.native.rsplit(".", 1)[1], importlib.import_module(self.native))
        if self.ops_module:
            # the vendor's fused ops (torch_npu.npu_rms_norm, ...) and the Tensor methods the plugin adds
            # (x.npu_format_cast(...)), as importing the real plugin gives them
            ops = importlib.import_module(f"{__package__}.{self.ops_module}")
            ops.attach(module)
            for name, method in getattr(ops, "TENSOR_METHODS", {}).items():
                if not hasattr(torch.Tensor, name):
                    setattr(torch.Tensor, name, method)
            device_module = getattr(torch, self.device_type)
            for name, call in getattr(ops, "device_module_calls", dict)().items():
                if not hasattr(device_module, name):
                    setattr(device_module, name, call)
            # the plugin imports its submodules with itself (torch_npu.npu.utils, torch_npu.optim are attributes
            # after `import torch_npu` alone, and the vendor's tests use them so)
            lazy = getattr(ops, "LAZY_SUBMODULES", frozenset())
            for sub in self._ops_submodules():
                if sub not in lazy:
                    importlib.import_module(f"{self.name}.{sub}")

    def _native_module(self) -> types.ModuleType:
        module = types.ModuleType(self.native, f"torch-fl's emulation of {self.native}: the device calls")
        module.__file__ = __file__
        module.__dict__.update(_native_calls(self.device_type))
        if self.ops_module:
            ops = importlib.import_module(f"{__package__}.{self.ops_module}")
            module.__dict__.update(getattr(ops, "native_calls", dict)())
        return module



def _delegate(module: types.ModuleType, device_module: Any) -> None:
    """Names `module` lacks are the device module's (PEP 562 module __getattr__): torch_musa.set_device is
    torch.musa.set_device, as the plugin package is the device module."""

    def __getattr__(name: str) -> Any:
        if name.startswith("__"):  # (import machinery probes; the package answers those itself)
            raise AttributeError(name)
        try:
            return getattr(device_module, name)
        except AttributeError:
            raise AttributeError(f"module '{module.__name__}' has no attribute '{name}' (torch-fl's emulation of "
                                 f"the plugin offers the device module's calls and the names in "
                                 f"docs/vendor-ops.md)") from None

    def __dir__() -> list[str]:
        return sorted(set(module.__dict__) | {n for n in dir(device_module) if not n.startswith("__")})

    module.__getattr__ = __getattr__  # type: ignore[method-assign]
    module.__dir__ = __dir__  # type: ignore[method-assign]


def _reexport(name: str, target: str) -> types.ModuleType:
    """Module `name` offering the public names of torch-fl's module `target` (which keeps its own identity)."""
    source = importlib.import_module(target)
    module = types.ModuleType(name, source.__doc__)
    module.__dict__.update({key: getattr(source, key) for key in getattr(source, "__all__", ())})
    module.__file__ = source.__file__
    return module


def _native_calls(kind: str) -> dict[str, Any]:
    """The plugin's C bindings that Python code reaches for directly (ditorch's CUDA mocks call
    ``torch_npu._C._npu_setDevice`` and ``_npu_setStream``; the vendors' tests ``_npu_hasPrimaryContext``,
    ``_mlu_getCurrentRawStream``), as the device module's calls. Named ``_<device type>_<call>`` by every
    PrivateUse1 plugin (torch_npu, torch_mlu, torch_musa)."""
    module = getattr(torch, kind)

    def exchange(index: int) -> int:
        previous = module.current_device()
        module.set_device(index)
        return previous

    return {
        f"_{kind}_setDevice": module.set_device, f"_{kind}_getDevice": module.current_device,
        f"_{kind}_getDeviceWithoutSet": module.current_device, f"_{kind}_maybeExchangeDevice": exchange,
        f"_{kind}_exchangeDevice": exchange,
        f"_{kind}_getDeviceCount": module.device_count, f"_{kind}_synchronize": module.synchronize,
        f"_{kind}_setStream": lambda *args, **kwargs: None,  # (one host stream: nothing to switch)
        f"_{kind}_init": module.init,
        # (an emulated device is initialized with the process: its context exists once it does)
        f"_{kind}_hasPrimaryContext": lambda index: 0 <= int(index) < module.device_count(),
        f"_{kind}_is_bf16_supported": module.is_bf16_supported,
        f"_{kind}_getCurrentRawStream": lambda device=None: 0,  # (the host's one stream has no handle)
        f"_{kind}_isHistoryEnabled": lambda: False,  # (no allocator history is recorded)
        # thread-to-core binding makes the chip's host threads faster; there is nothing to bind
        f"_{kind}_set_thread_affinity": lambda *args, **kwargs: None,
        f"_{kind}_reset_thread_affinity": lambda *args, **kwargs: None,
    }


def plugin_version(desc: Any) -> str:
    """The version the emulated plugin reports: the release line its op table answers for (the installed
    plugin's, else the newest), as a PEP 440 version with a local label ('2.5.1+torchfl.emu')."""
    resolved = desc.native_table()
    line = resolved[1] if resolved else None
    if not line:
        return f"{torch.__version__.split('+')[0]}+torchfl.emu"
    parts = line.split(".")
    return ".".join(parts + ["0"] * (3 - len(parts))) + "+torchfl.emu"


_installed: dict[str, EmulatedPlugin] = {}


def installed() -> dict[str, EmulatedPlugin]:
    """Plugin name -> its emulation, for doctor and tests."""
    return dict(_installed)


def install(desc: Any, device_type: str) -> str:
    """Answer ``import <desc.plugin>`` with the emulated package for this process; returns why not ('' when
    installed). Only for a chip emulated under its vendor's device type, and never over a real plugin."""
    name = desc.plugin
    if not name or name in _installed:
        return ""
    if name in sys.modules or importlib.machinery.PathFinder.find_spec(name) is not None:
        reason = (f"'{name}' is installed: `import {name}` loads the vendor's real plugin, which cannot share "
                  f"the process with the emulated '{device_type}' (uninstall it, or use a separate venv, to "
                  f"run vendor code on the emulated chip)")
        _log.warning("%s", reason)
        return reason
    finder = _installed[name] = EmulatedPlugin(desc, device_type)
    provide(name, finder)  # torch-fl's one import hook (_imports.py) answers the name from now on
    return ""
