"""``torch.<chip>`` of an emulated plugin chip (``torch.npu`` under ``FL_DEVICE=emu:npu``): the device-module
calls public vendor code makes, answered by the emulator.

The surface is what code written for the vendor's plugin reaches for, gathered from public users of it
(DeepSpeed's ``accelerator/npu_accelerator.py`` and ``mlu_accelerator.py``, accelerate's and transformers'
npu/mlu/musa branches, Ascend's samples): device selection by ordinal, string or device, amp autocast and
GradScaler (``torch.npu.amp``), config switches (``torch.npu.config.allow_internal_format``,
``torch.npu.matmul.allow_hf32``), compile mode (``torch.npu.set_compile_mode``), memory statistics,
streams and events, seeding, device properties and the legacy tensor types (``torch.npu.FloatTensor``).
Calls without a meaning on the CPU (compile mode, options, internal formats) are recorded and do nothing,
as on the real chip they change speed, not values.
"""

from __future__ import annotations

import contextlib
import functools
import types
from collections.abc import Callable
from typing import Any

import torch

from . import identity, memory
from .identity import DeviceProperties
from .slot import backend_name, state


def device_index(where: Any) -> int:
    """The ordinal of `where` as the vendor's ``set_device`` takes it: 1, "npu:1", "npu", torch.device."""
    if where is None:
        return state.current
    if isinstance(where, int):
        return where
    if isinstance(where, str) and where.strip().isdigit():
        return int(where)
    try:
        dev = torch.device(where)
    except (RuntimeError, TypeError, ValueError):
        raise ValueError(f"{where!r} is not a device of the emulated chip: give an ordinal (0), a device "
                         f"string ('{backend_name()}:0') or a torch.device") from None
    if dev.type != backend_name():
        raise ValueError(f"{where!r} is a '{dev.type}' device, not one of the emulated chip's "
                         f"('{backend_name()}:N')")
    return state.current if dev.index is None else dev.index


class _Amp:
    """``torch.<chip>.amp``: autocast and GradScaler on the chip, as ``torch.cuda.amp`` is on CUDA."""

    @property
    def autocast(self) -> type:
        return _chip_autocast()

    @property
    def GradScaler(self) -> type:
        return _chip_grad_scaler()

    # the plugin's amp submodules, which code and tests reach through the package (torch_npu.npu.amp.autocast_mode,
    # and torch.cuda.amp.autocast_mode after transfer_to_npu): each holds what its name says, on the chip
    @functools.cached_property
    def autocast_mode(self) -> types.SimpleNamespace:
        return types.SimpleNamespace(autocast=_chip_autocast(), custom_fwd=self.custom_fwd, custom_bwd=self.custom_bwd)

    @functools.cached_property
    def grad_scaler(self) -> types.SimpleNamespace:
        return types.SimpleNamespace(GradScaler=_chip_grad_scaler())

    @functools.cached_property
    def common(self) -> types.SimpleNamespace:
        return types.SimpleNamespace(amp_definitely_not_available=lambda: False)

    @staticmethod
    def custom_fwd(fwd: Callable | None = None, **kwargs: Any) -> Any:
        return torch.amp.custom_fwd(fwd, device_type=backend_name(), **kwargs)

    @staticmethod
    def custom_bwd(bwd: Callable | None = None) -> Any:
        return torch.amp.custom_bwd(bwd, device_type=backend_name())


@functools.cache
def _chip_autocast() -> type:
    class autocast(torch.amp.autocast):
        """``torch.<chip>.amp.autocast(enabled=True, dtype=torch.float16, cache_enabled=True)``."""

        def __init__(self, enabled: bool = True, dtype: torch.dtype = torch.float16,
                     cache_enabled: bool = True) -> None:
            super().__init__(backend_name(), dtype=dtype, enabled=enabled, cache_enabled=cache_enabled)

    return autocast


@functools.cache
def _chip_grad_scaler() -> type:
    class GradScaler(torch.amp.GradScaler):
        """``torch.<chip>.amp.GradScaler(...)``: PyTorch's GradScaler on the chip's device type."""

        def __init__(self, init_scale: float = 2.0**16, growth_factor: float = 2.0, backoff_factor: float = 0.5,
                     growth_interval: int = 2000, enabled: bool = True, **_vendor: Any) -> None:
            # (_vendor: torch_npu's dynamic=True and friends, which choose a scaling strategy, not values)
            super().__init__(backend_name(), init_scale=init_scale, growth_factor=growth_factor,
                             backoff_factor=backoff_factor, growth_interval=growth_interval, enabled=enabled)

    # picklable by name, as the vendor's class is (checkpoints pickle the scaler; a local class is not found)
    GradScaler.__qualname__ = "GradScaler"
    globals()["GradScaler"] = GradScaler
    return GradScaler


class _Switches:
    """A namespace of boolean switches (``torch.npu.config``, ``torch.npu.matmul``): recorded, no effect on
    the CPU (internal formats and HF32 change the chip's speed and rounding, not the program)."""

    def __init__(self, **defaults: Any) -> None:
        self.__dict__.update(defaults)

    def __repr__(self) -> str:
        return f"<emulated switches {self.__dict__}>"


class _TensorType(type):
    """``torch.<chip>.FloatTensor`` and friends: a factory of that dtype on the chip, and an isinstance test
    (``isinstance(t, torch.npu.HalfTensor)``) by dtype and device type."""

    dtype: torch.dtype

    def __call__(cls, *sizes: Any) -> torch.Tensor:
        if len(sizes) == 1 and not isinstance(sizes[0], int):
            return torch.tensor(sizes[0], dtype=cls.dtype, device=torch.device(backend_name(), state.current))
        return torch.empty(*sizes, dtype=cls.dtype, device=torch.device(backend_name(), state.current))

    def __instancecheck__(cls, value: Any) -> bool:
        return isinstance(value, torch.Tensor) and value.dtype == cls.dtype and value.device.type == backend_name()


class _StorageType(type):
    """``torch.<chip>.FloatStorage`` and friends (the legacy typed storages a plugin defines, as ``torch.cuda``'s):
    a typed storage of that dtype on the chip, and an isinstance test by dtype and device type."""

    dtype: torch.dtype

    def __call__(cls, *args: Any, **kwargs: Any) -> torch.TypedStorage:
        if "wrap_storage" in kwargs:
            # the wrapped untyped storage says where it lives; TypedStorage refuses a device beside it
            # (torch_mlu's tests: ComplexDoubleStorage(wrap_storage=s.untyped()))
            return torch.TypedStorage(*args, dtype=cls.dtype, **kwargs)
        device = torch.device(backend_name(), state.current)
        return torch.TypedStorage(*args, dtype=cls.dtype, device=device, **kwargs)

    def __instancecheck__(cls, value: Any) -> bool:
        return (isinstance(value, torch.TypedStorage) and value.dtype == cls.dtype
                and value.device.type == backend_name())


_STORAGE_TYPES = {"FloatStorage": torch.float32, "DoubleStorage": torch.float64, "HalfStorage": torch.float16,
                  "BFloat16Storage": torch.bfloat16, "ByteStorage": torch.uint8, "CharStorage": torch.int8,
                  "ShortStorage": torch.int16, "IntStorage": torch.int32, "LongStorage": torch.int64,
                  "BoolStorage": torch.bool, "ComplexFloatStorage": torch.complex64,
                  "ComplexDoubleStorage": torch.complex128}

# The vendor module each torch.<chip> is (its __name__)
_DEVICE_MODULE_NAMES = {"musa": "torch_musa", "mlu": "torch_mlu.mlu", "npu": "torch_npu.npu"}

def _device_module(name: str) -> Any:
    """``torch.<name>`` in the process that unpickles it: the vendor's plugin imported (which emulates the chip
    where FL_DEVICE names it), as unpickling a module imports it."""
    import importlib

    importlib.import_module(_DEVICE_MODULE_NAMES.get(name, "torch_fl").split(".")[0])
    return getattr(torch, name)


# Where each vendor defines its legacy storage classes (their __module__): torch_mlu/mlu/__init__.py and
# torch_npu/npu/__init__.py define FloatStorage & co. (torch.cuda's are in torch.cuda)
_STORAGE_MODULES = {"mlu": "torch_mlu.mlu", "npu": "torch_npu.npu"}

_TENSOR_TYPES = {"FloatTensor": torch.float32, "DoubleTensor": torch.float64, "HalfTensor": torch.float16,
                 "BFloat16Tensor": torch.bfloat16, "ByteTensor": torch.uint8, "CharTensor": torch.int8,
                 "ShortTensor": torch.int16, "IntTensor": torch.int32, "LongTensor": torch.int64,
                 "BoolTensor": torch.bool}


def chip_identity_class(base: type) -> type:
    """`base` (a backend module class) answering the chip's identity (identity.py): its name, properties and
    bfloat16 support, as the vendor's runtime reports them."""

    class ChipIdentity(base):  # type: ignore[misc, valid-type]
        @staticmethod
        def get_device_name(device: Any = None) -> str:
            device_index(device)  # (a wrong device is refused, as the vendor's call refuses it)
            return identity.device_name()

        def get_device_properties(self, device: Any = None) -> DeviceProperties:
            return DeviceProperties(identity.device_name(), self.mem_get_info(device_index(device))[1])

        @staticmethod
        def is_bf16_supported(including_emulation: bool = True) -> bool:
            # (including_emulation: CUDA's software bfloat16 on pre-Ampere GPUs; an NPU has none)
            return identity.is_bf16_supported()

        @staticmethod
        def get_device_capability(device: Any = None) -> tuple[int, int] | None:
            # (None where the chip has none, as torch_npu answers for any argument, a device name included)
            return identity.capability()

    return ChipIdentity


def vendor_module_class(base: type, name: str, stream_type: type) -> type:
    """The class of ``torch.<name>``: the emulator's backend module `base` plus the vendor's calls."""

    class VendorModule(chip_identity_class(base)):  # type: ignore[misc]
        """``torch.<chip>`` of an emulated plugin chip: the plugin's device-module calls."""

        Stream = stream_type  # streams, events, memory and seeding calls are the emulator's own (base)
        # the module's name, as the vendor's torch.<chip> answers it (torch_musa: torch.musa is the torch_musa
        # module itself; torch_npu.npu, torch_mlu.mlu): cloudpickle reads it to decide how to pickle a function
        # that uses torch.<chip> (torch_musa's spawn_isolated_test tests)
        __name__ = _DEVICE_MODULE_NAMES.get(name, f"torch.{name}")

        def __reduce__(self) -> tuple[Any, tuple[str]]:
            # by reference, as pickle and cloudpickle take a module: cloudpickle pickles the submodules a
            # function reads (torch.<chip>) and, this being no module object, took it by value, down to a lock
            return _device_module, (name,)
        amp = _Amp()
        config = _Switches(allow_internal_format=False)
        matmul = _Switches(allow_hf32=False)
        conv = _Switches(allow_hf32=True)
        options: dict[str, Any] = {}  # noqa: RUF012  (set_option's record)
        jit_compile = True

        @staticmethod
        def set_device(where: Any) -> None:
            index = device_index(where)
            if not 0 <= index < max(state.count, 1):
                raise RuntimeError(f"{backend_name()}:{index} does not exist: {state.count} emulated device(s). "
                                   f"Set FL_EMU_DEVICES={index + 1} for more.")
            state.current = index

        @staticmethod
        def init() -> None:
            pass

        @staticmethod
        def _lazy_call(callback: Callable[[], Any], **_: Any) -> None:
            callback()  # the device is initialized already


        @staticmethod
        def can_device_access_peer(device: Any, peer_device: Any) -> bool:
            # two distinct emulated devices share the host's memory, so each reaches the other's data; a device is
            # not its own peer (the vendor answers False), and ids that do not exist fail as the vendor's asserts do
            count = max(state.count, 1)
            for where, what in ((device, "device"), (peer_device, "peer device")):
                if not 0 <= device_index(where) < count:
                    raise AssertionError(f"Invalid {what} id: {where!r} ({count} emulated device(s))")
            return device_index(device) != device_index(peer_device)

        @staticmethod
        def is_autocast_enabled() -> bool:
            return torch.is_autocast_enabled(backend_name())

        @staticmethod
        def set_autocast_enabled(enabled: bool) -> None:
            torch.set_autocast_enabled(backend_name(), enabled)

        @staticmethod
        def get_autocast_dtype() -> torch.dtype:
            return torch.get_autocast_dtype(backend_name())

        @staticmethod
        def set_autocast_dtype(dtype: torch.dtype) -> None:
            torch.set_autocast_dtype(backend_name(), dtype)

        @staticmethod
        def set_compile_mode(jit_compile: bool = True) -> None:
            VendorModule.jit_compile = bool(jit_compile)

        @staticmethod
        def is_jit_compile_false() -> bool:
            return not VendorModule.jit_compile

        @staticmethod
        def set_option(option: dict[str, Any]) -> None:
            if not isinstance(option, dict):
                raise TypeError(f"set_option takes a dict of option names to values, not {type(option).__name__}")
            VendorModule.options.update(option)

        # (memory_reserved, max_memory_reserved, memory_stats, memory_summary: the emulator's own, in base)
        memory_cached = staticmethod(base.memory_reserved)
        max_memory_cached = staticmethod(base.max_memory_reserved)

        @staticmethod
        def reset_max_memory_allocated(device: Any = None) -> None:
            memory.reset_peak_memory_stats(device_index(device))

        reset_max_memory_cached = reset_max_memory_allocated

        @staticmethod
        def reset_accumulated_memory_stats(device: Any = None) -> None:
            memory.reset_accumulated_memory_stats(device_index(device))

        @staticmethod
        def set_per_process_memory_fraction(fraction: float, device: Any = None) -> None:
            memory.set_per_process_memory_fraction(fraction, device_index(device))

        @staticmethod
        def get_per_process_memory_fraction(device: Any = None) -> float:
            return float(memory.allocator_settings["per_process_memory_fraction"])

        @staticmethod
        def device_of(obj: Any) -> Any:
            if isinstance(obj, torch.Tensor) and obj.device.type == backend_name():
                return base.device(obj.device.index or 0)
            return contextlib.nullcontext()

    for kind, dtype in _TENSOR_TYPES.items():
        setattr(VendorModule, kind, _TensorType(kind, (), {"dtype": dtype}))
    for kind, dtype in _STORAGE_TYPES.items():
        # (TypedStorage.type() names the legacy class by its module: "torch_mlu.mlu.FloatStorage" on the chip)
        module = _STORAGE_MODULES.get(name, f"torch.{name}")
        setattr(VendorModule, kind, _StorageType(kind, (), {"dtype": dtype, "__module__": module}))
    from . import graphs

    for kind, value in graphs.device_module_calls(name).items():  # (NPUGraph, graph, graph_pool_handle, ...)
        setattr(VendorModule, kind, value if isinstance(value, type) else staticmethod(value))
    VendorModule.__name__ = VendorModule.__qualname__ = f"torch.{name} (torch-fl emulation)"
    return VendorModule
