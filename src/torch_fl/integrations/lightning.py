"""PyTorch Lightning on torch.fl.device(): ``Trainer(accelerator="torchfl")``.

Importing this module registers the accelerator in Lightning's ``AcceleratorRegistry`` under
``"torchfl"`` (and under the resolved device's own name, e.g. ``"emu:0"`` or ``"npu"``, where Lightning
has no accelerator of that name), in ``pytorch_lightning`` and in ``lightning.pytorch``, whichever are
installed. Lightning has no entry-point group for accelerators (only for callbacks, which it loads
after it has chosen the accelerator), so the import is the registration; ``accelerator=
TorchFLAccelerator()`` works without it.

``accelerator="auto"`` is Lightning's fixed order (TPU, MPS, CUDA, CPU, in
``lightning_fabric.utilities.device_parser._select_auto_accelerator``): it cannot name a third-party
accelerator without patching Lightning, which torch-fl does not do. Under ``FL_CUDA_ALIAS=1`` "auto"
picks Lightning's CUDA accelerator, whose ``torch.cuda`` calls the alias sends to torch.fl.device().

Lightning hands a single-device run to ``SingleDeviceStrategy("cpu")`` for any accelerator that is not
one of its GPU names, and builds ``precision="16-mixed"``/``"bf16-mixed"`` for ``"cuda"``;
:meth:`TorchFLAccelerator.setup` points both at the torch-fl device before the model is moved.
"""

from __future__ import annotations

import importlib
import importlib.util
from types import ModuleType
from typing import Any

import torch

import torch_fl  # noqa: F401  (binds torch.fl)
from torch_fl.device import is_emulated

__all__ = ["NAME", "TorchFLAccelerator", "accelerator_class", "register"]

NAME = "torchfl"
# Where Lightning lives: the standalone package first (this project's dev extra), then the umbrella one.
_PACKAGES = ("pytorch_lightning", "lightning.pytorch")


def _lightning_packages() -> list[ModuleType]:
    found = []
    for name in _PACKAGES:
        try:
            if importlib.util.find_spec(name.split(".")[0]) is None:
                continue
            found.append(importlib.import_module(name))
        except (ImportError, ValueError):  # ValueError: a module blocked in sys.modules (None)
            continue
    if not found:
        raise ImportError("torch_fl.integrations.lightning needs PyTorch Lightning, which is not installed: "
                          "pip install pytorch-lightning (or lightning)")
    return found


# ------------------------------------------------------------------ devices (framework-independent)

def _pool(spec: Any = None) -> list[torch.device]:
    """The devices a Trainer may use: the chosen one (FL_DEVICE, or `spec`) first, then the other
    virtual devices of this machine in acc order."""
    chosen = torch.fl.device(spec)
    rest = [d for d in torch.fl.devices() if d != chosen and d.type == chosen.type]
    return [chosen, *rest]


def parse_devices(devices: Any) -> int | list[int]:
    """Lightning's `devices` flag as a count or a list of positions in the pool ("-1": all)."""
    if isinstance(devices, str):
        text = devices.strip()
        if text in ("-1", "auto"):
            return len(_pool())
        if "," in text:
            return [int(p) for p in text.split(",") if p.strip()]
        devices = int(text)
    if isinstance(devices, int):
        if devices == -1:
            return len(_pool())
        if devices < 1:
            raise ValueError(f"Trainer(accelerator='{NAME}', devices={devices}): devices must be >= 1 or -1 (all)")
        return devices
    return [int(d) for d in devices]


def parallel_devices(devices: Any, spec: Any = None) -> list[torch.device]:
    """The torch.devices for a parsed `devices` flag: the first N of the pool, or the listed positions."""
    pool = _pool(spec)
    wanted = list(range(devices)) if isinstance(devices, int) else list(devices)
    missing = [i for i in wanted if not 0 <= i < len(pool)]
    if missing:
        raise ValueError(
            f"Trainer(accelerator='{NAME}', devices={devices!r}) asks for device position(s) {missing}, but this "
            f"machine has {len(pool)} torch-fl device(s): {[str(d) for d in pool]}. Ask for fewer devices, or map "
            f"more (FL_DEVICE_MAP, or FL_EMU_DEVICES=N for an emulated chip).")
    chosen = [pool[i] for i in wanted]
    if len(chosen) > 1 and all(is_emulated(d) for d in chosen):
        # Lightning's DDP runs one process per device, and each emulated device lives in its own process:
        # every rank trains on its own emu:0 (PyTorch's autograd engine cannot run backward on emu:1 of a
        # Python backend, which sizes its device queues once per process).
        return [torch.device(chosen[0].type, 0)] * len(chosen)
    return chosen


def device_stats(device: Any) -> dict[str, float]:
    """What DeviceStatsMonitor logs: torch.fl memory counters and the non-native calls per route."""
    dev = torch.fl.device(device)
    stats: dict[str, float] = {
        "memory_allocated": float(torch.fl.memory_allocated(dev)),
        "max_memory_allocated": float(torch.fl.max_memory_allocated(dev)),
    }
    try:
        free, total = torch.fl.mem_get_info(dev)
    except Exception:  # a runtime without a memory query: the counters above still tell the story
        pass
    else:
        stats["memory_free"], stats["memory_total"] = float(free), float(total)
    for row in torch.fl.route_stats():
        key = f"{row['route']}_calls"
        stats[key] = stats.get(key, 0.0) + float(row["calls"])
    return stats


def _point_strategy_at(trainer: Any, device: torch.device, pl: ModuleType) -> None:
    """Give Lightning's single-device strategy and AMP plugin the torch-fl device (see module doc)."""
    strategy = trainer.strategy
    if isinstance(strategy, pl.strategies.SingleDeviceStrategy) and strategy.root_device != device:
        # Lightning keeps the device in this attribute only; the strategy has no setter.
        strategy._root_device = device
    ddp = getattr(pl.strategies, "DDPStrategy", None)
    if ddp is not None and isinstance(strategy, ddp) and device.type != "cuda":
        # Lightning's DDPStrategy wraps the model in `torch.cuda.stream(torch.cuda.Stream())` whenever it
        # passes device_ids, which fails off CUDA; DDP takes the device from the parameters without them.
        strategy.determine_ddp_device_ids = lambda: None
    plugin = strategy.precision_plugin
    amp = pl.plugins.precision.MixedPrecision
    if isinstance(plugin, amp) and plugin.device != device.type:
        plugin.device = device.type
        if plugin.scaler is not None:
            plugin.scaler = torch.amp.GradScaler(device=device.type)


# ------------------------------------------------------------------------------ the accelerator

_classes: dict[str, type] = {}


def accelerator_class(pl: ModuleType | None = None) -> type:
    """The TorchFLAccelerator subclassing `pl`'s Accelerator (default: the first Lightning installed)."""
    pl = pl or _lightning_packages()[0]
    if pl.__name__ in _classes:
        return _classes[pl.__name__]
    base = pl.accelerators.Accelerator

    class TorchFLAccelerator(base):  # type: ignore[misc, valid-type]
        """Lightning accelerator for torch.fl.device() (FL_DEVICE), emulated chips included.

        Args:
            device: a torch-fl device spec ("acc1", "emu:0", "npu:0"); default torch.fl.device().
        """

        def __init__(self, device: Any = None) -> None:
            super().__init__()
            self.spec = device

        @property
        def device(self) -> torch.device:
            return torch.fl.device(self.spec)

        def setup_device(self, device: torch.device) -> None:
            # Lightning may call this with its CPU placeholder before setup() corrects the strategy.
            if device.type != "cpu":
                torch.fl.set_device(device)

        def setup(self, trainer: Any) -> None:
            connector = getattr(trainer, "_accelerator_connector", None)
            devices = list(getattr(connector, "_parallel_devices", None) or [self.device])
            # Lightning asks the class for devices (FL_DEVICE's pool); an instance may name its own.
            _point_strategy_at(trainer, self.device if self.spec is not None else devices[0], pl)
            self.setup_device(trainer.strategy.root_device)

        def teardown(self) -> None:
            pass  # nothing to release: torch-fl devices are plain torch devices

        @staticmethod
        def parse_devices(devices: Any) -> int | list[int]:
            return parse_devices(devices)

        @staticmethod
        def get_parallel_devices(devices: Any) -> list[torch.device]:
            return parallel_devices(devices)

        @staticmethod
        def auto_device_count() -> int:
            return len(_pool())

        @staticmethod
        def is_available() -> bool:
            return bool(torch.fl.is_available())

        @staticmethod
        def name() -> str:
            return NAME

        def get_device_stats(self, device: Any) -> dict[str, float]:
            return device_stats(device)

        @classmethod
        def register_accelerators(cls, accelerator_registry: Any) -> None:
            accelerator_registry.register(NAME, cls, description="torch.fl.device() (FL_DEVICE), via torch-fl",
                                          override=True)

    TorchFLAccelerator.__module__ = __name__
    _classes[pl.__name__] = TorchFLAccelerator
    return TorchFLAccelerator


def _device_names(registry: Any) -> list[tuple[str, str]]:
    """(name, device) for the resolved device's own names Lightning does not already use ("emu:0",
    "emu"), so that Trainer(accelerator=str(torch.fl.device())) trains there."""
    try:
        dev = torch.fl.device()
    except Exception:  # no device resolves: "torchfl" alone is registered; its use will say why
        return []
    taken = set(registry.available_accelerators())
    names = [str(dev), dev.type] if dev.index is not None else [dev.type]
    return [(n, str(dev)) for n in dict.fromkeys(names) if n not in taken and n != NAME]


def register() -> list[str]:
    """Register the accelerator in every installed Lightning; returns the names registered."""
    names: list[str] = []
    for pl in _lightning_packages():
        cls = accelerator_class(pl)
        registry = pl.accelerators.AcceleratorRegistry
        cls.register_accelerators(registry)
        names.append(NAME)
        for name, device in _device_names(registry):
            registry.register(name, cls, description=f"{device} via torch-fl", device=device)
            names.append(name)
    return list(dict.fromkeys(names))


TorchFLAccelerator = accelerator_class()
REGISTERED = register()
