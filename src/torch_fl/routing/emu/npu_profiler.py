"""``torch_npu.profiler`` of the emulated Ascend plugin: the vendor's profiler API on PyTorch's profiler.

torch_npu's profiler is PyTorch's (``profile``, ``schedule``, ``tensorboard_trace_handler``, ``record_function``,
``ProfilerAction``) with the NPU activity and an ``experimental_config`` that selects what CANN collects
(``profiler_level``, ``aic_metrics``, ``l2_cache``, ``export_type``, ...). On the emulated chip every op runs on the
host when it is called, so its profile is Kineto's host trace of the device's ops (profiling.py): ``profile`` is
``torch.profiler.profile`` with the chip's activity (``ProfilerActivity.NPU`` is PyTorch's PrivateUse1 activity),
and the experimental config is validated and recorded (there are no AI Core counters, L2 cache or CANN
timelines to collect: the trace says what the host ran). ``analyse`` (the vendor's offline parser of CANN's raw
profiling data) has no such data to parse: the trace ``tensorboard_trace_handler`` writes is already final.
"""

from __future__ import annotations

import enum
from typing import Any

import torch
import torch.profiler as _tp

record_function = _tp.record_function
schedule = _tp.schedule
ProfilerAction = _tp.ProfilerAction


class ProfilerActivity:
    """The activities the vendor's profiler takes: the host's and the chip's (PyTorch's PrivateUse1 activity)."""

    CPU = _tp.ProfilerActivity.CPU
    NPU = _tp.ProfilerActivity.PrivateUse1


def supported_activities() -> set[Any]:
    return {ProfilerActivity.CPU, ProfilerActivity.NPU}


class ExportType:
    Text = "text"
    Db = "db"


class ProfilerLevel:
    Level_none = "Level_none"
    Level0 = "Level0"
    Level1 = "Level1"
    Level2 = "Level2"


class AiCMetrics:
    AiCoreNone = "ACL_AICORE_NONE"
    PipeUtilization = "ACL_AICORE_PIPE_UTILIZATION"
    ArithmeticUtilization = "ACL_AICORE_ARITHMETIC_UTILIZATION"
    Memory = "ACL_AICORE_MEMORY_BANDWIDTH"
    MemoryL0 = "ACL_AICORE_L0B_AND_WIDTH"
    ResourceConflictRatio = "ACL_AICORE_RESOURCE_CONFLICT_RATIO"
    MemoryUB = "ACL_AICORE_MEMORY_UB"
    L2Cache = "ACL_AICORE_L2_CACHE"
    MemoryAccess = "ACL_AICORE_MEMORY_ACCESS"


class HostSystem(enum.Enum):
    CPU = "cpu"
    MEM = "mem"
    DISK = "disk"
    NETWORK = "network"
    OSRT = "osrt"


_LEVELS = {v for k, v in vars(ProfilerLevel).items() if not k.startswith("_")}
_METRICS = {v for k, v in vars(AiCMetrics).items() if not k.startswith("_")}
_EXPORTS = {ExportType.Text, ExportType.Db}


class _ExperimentalConfig:
    """What CANN would collect (recorded: the emulated chip's trace is the host's). Values outside the vendor's
    choices are refused, as the vendor's config refuses them."""

    def __init__(self, profiler_level: str = ProfilerLevel.Level0, aic_metrics: str = AiCMetrics.AiCoreNone,
                 l2_cache: bool = False, op_attr: bool = False, data_simplification: bool = True,
                 record_op_args: bool = False, export_type: Any = ExportType.Text, msprof_tx: bool = False,
                 **more: Any) -> None:
        if profiler_level not in _LEVELS:
            raise ValueError(f"profiler_level '{profiler_level}' is not one of {sorted(_LEVELS)}")
        if aic_metrics not in _METRICS:
            raise ValueError(f"aic_metrics '{aic_metrics}' is not one of {sorted(_METRICS)}")
        exports = export_type if isinstance(export_type, (list, tuple)) else [export_type]
        if not set(exports) <= _EXPORTS:
            raise ValueError(f"export_type {export_type!r} is not '{ExportType.Text}' or '{ExportType.Db}'")
        self.profiler_level, self.aic_metrics, self.l2_cache = profiler_level, aic_metrics, bool(l2_cache)
        self.op_attr, self.data_simplification = bool(op_attr), bool(data_simplification)
        self.record_op_args, self.export_type, self.msprof_tx = bool(record_op_args), list(exports), bool(msprof_tx)
        self.more = dict(more)  # (host_sys, mstx_domain_include, sys_io, ...: later releases' switches)

    def __call__(self) -> Any:  # (PyTorch's profile() calls an experimental config to get its C++ object)
        return torch._C._profiler._ExperimentalConfig()


class profile(_tp.profile):
    """``torch_npu.profiler.profile``: PyTorch's profiler with the chip's activity (ProfilerActivity.NPU) and the
    vendor's experimental_config (recorded as ``self.npu_config``)."""

    def __init__(self, activities: Any = None, schedule: Any = None, on_trace_ready: Any = None,
                 record_shapes: bool = False, profile_memory: bool = False, with_stack: bool = False,
                 with_flops: bool = False, with_modules: bool = False, experimental_config: Any = None,
                 use_cuda: Any = None, custom_trace_id_callback: Any = None, **kwargs: Any) -> None:
        if experimental_config is not None and not isinstance(experimental_config, _ExperimentalConfig):
            raise TypeError("experimental_config must be a torch_npu.profiler._ExperimentalConfig")
        self.npu_config = experimental_config or _ExperimentalConfig()
        super().__init__(activities=list(activities) if activities is not None else sorted(
                             supported_activities(), key=lambda a: int(a.value)),
                         schedule=schedule, on_trace_ready=on_trace_ready, record_shapes=record_shapes,
                         profile_memory=profile_memory, with_stack=with_stack, with_flops=with_flops,
                         with_modules=with_modules, custom_trace_id_callback=custom_trace_id_callback, **kwargs)


def tensorboard_trace_handler(dir_name: str | None = None, worker_name: str | None = None,
                              analyse_flag: bool = True, async_mode: bool = False) -> Any:
    """Write each trace into `dir_name` (TensorBoard's layout) as PyTorch's handler does; analyse_flag/async_mode
    choose when the vendor parses CANN's data, of which the emulated chip has none."""
    return _tp.tensorboard_trace_handler(dir_name or "./", worker_name=worker_name)


def analyse(profiler_path: str, max_process_number: int = 1, **kwargs: Any) -> None:
    """The vendor's offline parse of CANN's raw data under `profiler_path`: the emulated chip writes none (its
    trace, from tensorboard_trace_handler, is final), so there is nothing to parse."""


__all__ = ["AiCMetrics", "ExportType", "HostSystem", "ProfilerAction", "ProfilerActivity", "ProfilerLevel",
           "_ExperimentalConfig", "analyse", "profile", "record_function", "schedule", "supported_activities",
           "tensorboard_trace_handler"]
