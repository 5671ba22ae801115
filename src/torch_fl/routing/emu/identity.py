"""Who the emulated device says it is: the chip's own name, SoC number and bfloat16 support, from its description.

Vendor code and the vendors' own test suites branch on the chip's identity: torch_npu's tests and kernels gate on
``torch.npu.get_device_name()`` ('Ascend910B1') and ``torch_npu.npu.utils.get_soc_version()`` (Atlas A2 = 220..225),
torch_mlu's on ``'MLU370' in torch.mlu.get_device_name()``, torch_musa's on ``'MTT S80'``, and transformers accepts
``bf16=True`` from ``torch.<chip>.is_bf16_supported()``. So the emulated device answers exactly what the chip it
emulates answers (``[identity]`` of its description: docs/descriptions.md), and says that it is emulated where
nothing keys on it: ``get_device_properties().emulated_by``, ``torchfl doctor`` and the log line at registration.
"""

from __future__ import annotations

from typing import Any

from .slot import state

# the chip the PrivateUse1 slot was registered for (vendor.announce): who the device is before any routing
# activates (torch.npu.get_device_name() right after `import torch_npu`, as the vendor's tests call it)
_registered: list[Any] = [None]


def remember(desc: Any) -> None:
    """Record `desc` as the chip the slot was registered for (once per process, at registration)."""
    _registered[0] = desc


def chip() -> Any:
    """The description whose identity the emulated device reports: the active emulation's, else the chip the
    slot was registered for; None when neither is known."""
    return state.description if state.description is not None else _registered[0]


def device_name() -> str:
    """The chip's name as its vendor's runtime reports it (identity.device_name)."""
    desc = chip()
    return desc.device_name if desc is not None else "torch-fl emulated device"


def soc_version() -> int:
    """The vendor's SoC number of the chip (identity.soc_version; -1 where the vendor reports none)."""
    desc = chip()
    return desc.soc_version if desc is not None else -1


def capability() -> tuple[int, int] | None:
    """The chip's (major, minor) compute capability (identity.capability); None where it reports none."""
    desc = chip()
    return desc.capability if desc is not None else None


def is_bf16_supported() -> bool:
    """Whether the chip computes bfloat16: its precision.dtypes list it (npu-910 and npu-310p do not)."""
    desc = chip()
    return desc is None or "bfloat16" in desc.dtypes


def emulated_by() -> str:
    """The line that says the device is emulated (in properties and doctor; never in the name, which vendor code
    compares)."""
    from ..._version import __version__

    desc = chip()
    return f"torch-fl {__version__} on the CPU (description '{getattr(desc, 'name', '?')}')"


_CUDA_ONLY_FIELDS = frozenset({"major", "minor", "is_multi_gpu_board", "is_integrated", "max_threads_per_multi_processor",
                               "warp_size", "regs_per_multiprocessor", "gcnArchName"})


class DeviceProperties:
    """What ``torch.<chip>.get_device_properties(i)`` gives: the chip's name, total memory, the counts the vendor
    reports (zero here: there are no cores to count), and ``emulated_by``."""

    def __init__(self, name: str, total_memory: int) -> None:
        self.name = name
        self.total_memory = total_memory
        self.multi_processor_count = 0
        # (torch_npu's own fields, which its tests read as ints)
        self.cube_core_num = self.vector_core_num = self.L2_cache_size = 0
        self.emulated_by = emulated_by()
        found = capability()
        if found is not None:  # (else None, below: the chip has no compute capability)
            self.major, self.minor = found

    def __getattr__(self, name: str) -> None:
        # CUDA's fields a plugin chip has no value for read as None, as torch_npu's properties give them (its
        # test_npu_get_unsupported_device_properties): code testing `props.major is None` takes the chip's path
        if name in _CUDA_ONLY_FIELDS:
            return None
        raise AttributeError(f"'_DeviceProperties' object has no attribute '{name}'")

    def __repr__(self) -> str:
        return (f"_DeviceProperties(name='{self.name}', total_memory={self.total_memory // 2**20}MB, "
                f"emulated_by='{self.emulated_by}')")


__all__ = ["DeviceProperties", "capability", "chip", "device_name", "emulated_by", "is_bf16_supported", "remember",
           "soc_version"]
