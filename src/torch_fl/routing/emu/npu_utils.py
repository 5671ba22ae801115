"""``torch_npu.npu.utils`` of the emulated Ascend plugin: the public names of torch_npu/npu/utils.py.

The vendor's tests and code import this module for the SoC gate (``get_soc_version()``: Atlas A2 = 220..225, the
A3 from 250, torch_npu/csrc/core/npu/NpuVariables.h), bfloat16 and inf/nan-mode checks, overflow checks and the
device, stream and dump calls. Each answers what the emulated chip (its description's ``[identity]`` and
``precision.dtypes``) answers: the device and stream calls are ``torch.npu``'s; dump, sync-debug and timeout
settings are recorded (they change diagnostics and speed on the chip, not values); the model-obfuscation calls,
which need the vendor's own cipher, are refused with an error saying so.
"""

from __future__ import annotations

import warnings
from typing import Any

import torch

from . import identity

# torch_npu's inf/nan mode (IsSupportInfNan, NpuVariables.cpp): on by default from Ascend910B1 (220) below the
# Ascend310B line (240), and from Ascend910_9391 (250); older SoCs saturate on overflow instead
_INF_NAN_SOCS = ((220, 240), (250, 100000))

# what the recorded calls were given (dump config, sync debug mode, op timeout)
settings: dict[str, Any] = {"sync_debug_mode": 0, "dump": None, "op_timeout_ms": None}


def _npu() -> Any:
    return torch.npu  # (the emulated device module: the slot carries the chip's name)


def get_soc_version() -> int:
    """The SoC number of the emulated chip (identity.soc_version of its description: Ascend910B1 = 220)."""
    return identity.soc_version()


def is_bf16_supported(including_emulation: bool = False) -> bool:
    """Whether the emulated chip computes bfloat16 (its precision.dtypes: no on npu-910 and npu-310p)."""
    return identity.is_bf16_supported()


def is_support_inf_nan() -> bool:
    """Whether the chip runs in inf/nan mode (overflow gives inf/nan, not a saturated value and a status flag):
    the vendor's rule on the SoC number."""
    soc = get_soc_version()
    return any(low <= soc < high for low, high in _INF_NAN_SOCS)


def npu_check_overflow(grad: Any) -> bool:
    """Whether `grad` (a tensor or float) overflowed: inf or nan in it. The emulated chip computes in IEEE
    arithmetic on the host, so its overflows are infs and nans on every SoC (the saturation mode's status flag
    of older SoCs does not exist here)."""
    if isinstance(grad, float):
        total = grad
    elif isinstance(grad, torch.Tensor):
        total = float(grad.float().sum())
    else:
        raise RuntimeError(f"npu_check_overflow takes a tensor or a float, not {type(grad).__name__}")
    return total in (float("inf"), -float("inf")) or total != total


def get_npu_overflow_flag() -> bool:
    """The saturation mode's overflow flag. Refused in inf/nan mode, as the vendor refuses it; elsewhere False:
    the emulated chip never saturates (its overflows are infs and nans: use npu_check_overflow)."""
    if is_support_inf_nan():
        raise RuntimeError("Unsupported api when soc_version >= Ascend910B1, please use npu_check_overflow "
                           f"(the emulated chip is {identity.device_name()}, in inf/nan mode)")
    return False


def clear_npu_overflow_flag() -> None:
    """Clears the saturation mode's flag; useless in inf/nan mode, where the vendor warns."""
    if is_support_inf_nan():
        warnings.warn("When soc_version >= Ascend910B1, clear_npu_overflow_flag is useless. Please remove it.",
                      stacklevel=2)


def get_cann_version(module: str = "CANN") -> str:
    """'' : no CANN runtime is installed under the emulated chip (torch_npu answers '' for a module it cannot
    read, and its own tests accept that)."""
    return ""


def _is_gte_cann_version(version: str, module: str = "CANN") -> bool:
    """False: no CANN version is installed, so none is at least `version`."""
    return False


def synchronize(device: Any = None) -> None:
    _npu().synchronize(device)


def set_device(device: Any) -> None:
    _npu().set_device(device)


def current_device() -> int:
    return _npu().current_device()


def device(device: Any) -> Any:
    return _npu().device(device)


def device_of(obj: Any) -> Any:
    return _npu().device_of(obj)


def stream(stream: Any) -> Any:
    return _npu().stream(stream)


def set_stream(stream: Any) -> None:
    _npu().set_stream(stream)


def current_stream(device: Any = None) -> Any:
    return _npu().current_stream(device)


def default_stream(device: Any = None) -> Any:
    return _npu().default_stream(device)


class StreamContext:
    """Context manager selecting stream `stream` (None: no change), as ``torch.cuda.StreamContext``."""

    def __init__(self, stream: Any) -> None:
        self.stream = stream
        self._context: Any = None

    def __enter__(self) -> None:
        if self.stream is not None:
            self._context = _npu().stream(self.stream)
            self._context.__enter__()

    def __exit__(self, *exc: Any) -> None:
        if self._context is not None:
            self._context.__exit__(*exc)
            self._context = None


_SYNC_DEBUG_MODES = {"default": 0, "warn": 1, "error": 2}


def set_sync_debug_mode(debug_mode: int | str) -> None:
    """Recorded: the chip reports host-device synchronizations in mode 1/'warn' and 2/'error'; the emulated
    device synchronizes with the host on every op, so there is nothing to report."""
    # (the vendor's messages, which its tests match)
    if isinstance(debug_mode, str):
        if debug_mode not in _SYNC_DEBUG_MODES:
            raise RuntimeError(f"invalid value of debug_mode, expected one of `default`, `warn`, `error` (got "
                               f"'{debug_mode}')")
        debug_mode = _SYNC_DEBUG_MODES[debug_mode]
    if int(debug_mode) not in _SYNC_DEBUG_MODES.values():
        raise RuntimeError(f"invalid value of debug_mode, expected one of 0,1,2 (got {debug_mode})")
    settings["sync_debug_mode"] = int(debug_mode)


def get_sync_debug_mode() -> int:
    return settings["sync_debug_mode"]


def init_dump() -> None:
    """Recorded: operator dumps are the chip's debugging facility; the emulated chip has no dump to write."""
    settings["dump"] = settings["dump"] or ""


def set_dump(cfg_file: str) -> None:
    settings["dump"] = str(cfg_file)


def finalize_dump() -> None:
    settings["dump"] = None


def current_blas_handle() -> None:
    warnings.warn("NPU does not use blas handle.", stacklevel=2)


def check_uce_in_memory(device_id: int) -> int:
    """0: no uncorrectable memory error (host memory reports none to the emulated chip)."""
    return 0


def stress_detect(detect_type: str = "aic") -> int:
    """0 (passed): there is no AI core or link to stress; an unknown detect_type warns and gives 1, as the vendor."""
    if detect_type not in ("aic", "hccs"):
        warnings.warn("Detect_type should be `aic` or `hccs`. For details, `aic` is for `Online aicore detect`, "
                      "and `hccs` is for `Online p2p detect`.", stacklevel=2)
        return 1
    return 0


def ipc_collect() -> None:
    """Nothing to collect: emulated device memory is host memory, freed with its tensors."""


def set_op_timeout_ms(timeout: int) -> None:
    """Recorded (an emulated op never times out); the value must fit the chip's unsigned 32-bit setting, with the
    errors the vendor's binding raises."""
    timeout = int(timeout)
    if timeout < 0:
        raise OverflowError("can't convert negative value to unsigned int")
    if timeout >= 2**32:
        raise OverflowError("Overflow when unpacking unsigned int")
    settings["op_timeout_ms"] = timeout


def _not_emulated(name: str) -> Any:
    def call(*args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError(f"torch_npu.npu.utils.{name} is not emulated by torch-fl: model obfuscation "
                                  f"runs the vendor's own cipher on the chip, which the CPU cannot reproduce. Run "
                                  f"it on the real NPU")
    call.__name__ = name
    return call


obfuscation_initialize = _not_emulated("obfuscation_initialize")
obfuscation_finalize = _not_emulated("obfuscation_finalize")
obfuscation_calculate = _not_emulated("obfuscation_calculate")

__all__ = [
    "StreamContext",
    "_is_gte_cann_version",
    "check_uce_in_memory",
    "clear_npu_overflow_flag",
    "current_blas_handle",
    "current_device",
    "current_stream",
    "default_stream",
    "device",
    "device_of",
    "finalize_dump",
    "get_cann_version",
    "get_npu_overflow_flag",
    "get_soc_version",
    "get_sync_debug_mode",
    "init_dump",
    "ipc_collect",
    "is_bf16_supported",
    "is_support_inf_nan",
    "npu_check_overflow",
    "obfuscation_calculate",
    "obfuscation_finalize",
    "obfuscation_initialize",
    "set_device",
    "set_dump",
    "set_op_timeout_ms",
    "set_stream",
    "set_sync_debug_mode",
    "stream",
    "stress_detect",
    "synchronize",
]
