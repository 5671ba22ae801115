"""``torch_npu.utils._step`` of the emulated Ascend plugin: the per-step hooks the vendor puts on ``Module.__call__``.

torch_npu can log the time of each training step (``PERF_DUMP_CONFIG="enable:true"``, log files
``$PERF_DUMP_PATH/perf_pt_<pid>_<device>.log`` with ``[STEPTIME]:<start ms>,<next start ms>`` lines: a step starts
at each outermost call of a module that is neither a loss nor a child of a module already seen) and configure its
silent data corruption check (``NPU_ASD_CONFIG="enable:true,cooldown:5,..."``, each value checked as the vendor
checks it: a bad ``with_checksum`` is an error, other bad values warn and keep the default). On the emulated chip
the step log is written as on the chip (the steps are the host's: its times are the emulation's); the silent
data check has no hardware to watch (host arithmetic does not flip bits unseen), so its configuration is parsed,
validated and recorded (``asd_settings``), and nothing is checked.
"""

from __future__ import annotations

import functools
import glob
import logging
import os
import stat
import time
import uuid
import warnings
from logging.handlers import RotatingFileHandler
from typing import Any

import torch

_PERMISSION = stat.S_IRUSR | stat.S_IWUSR | stat.S_IRGRP
_LOGGER = "perf_logger"

# the silent check's settings (NPU_ASD_CONFIG): name -> (default, smallest valid value)
_ASD_NUMBERS = {"cooldown": (5, 1), "strikes_num": (3, 1), "strikes_window": (480, 1), "checksum_cooldown": (180, 1),
                "upper_thresh1": (1000000, 3), "upper_thresh2": (100, 3), "grad_sample_interval": (3, 1)}
asd_settings: dict[str, Any] = {"with_checksum": False, **{k: v[0] for k, v in _ASD_NUMBERS.items()}}


class PerfDumpState:
    """What the step log knows: the top-level modules seen (with their children), whether the next call is an
    outermost one, the log file, the last step's start (ms) and the run's identifiers."""

    def __init__(self) -> None:
        self.module_dict: dict[Any, list[Any]] = {}
        self.is_outer_call = True
        self.log_file_name = ""
        self.last_time: int | None = None
        self.has_log = False
        self.local_uuid: Any = ""
        self.uuid = ""

    def add_module_dict(self, module: Any) -> None:
        """Remember `module` as a top-level module, with its submodules (which start no step)."""
        self.module_dict[module] = [sub for _, sub in module.named_modules() if sub is not module]

    def is_child_module(self, module: Any) -> bool:
        return any(module in children for children in self.module_dict.values())


perf_dump_state = PerfDumpState()
perf_dump_enable = False


class _StepLogHandler(RotatingFileHandler):
    """A rotating log whose every new file starts with the run's header, as the first one does."""

    def doRollover(self) -> None:
        super().doRollover()
        with open(self.baseFilename, "w", encoding="utf-8") as f:
            f.write(_header())
        os.chmod(self.baseFilename, _PERMISSION)


def _header() -> str:
    return (f"[LOCALUUID]:{perf_dump_state.local_uuid}\n[FRAMEWORK]:PyTorch\n"
            f"[UUID]:{perf_dump_state.uuid}\n")


def _is_loss_module(module: Any) -> bool:
    """Loss modules start no step (their call follows the model's in the same step)."""
    return isinstance(module, torch.nn.modules.loss._Loss)


def _validate_path(path: str) -> bool:
    """Whether `path` is absolute and exists (the vendor writes step logs only there)."""
    return os.path.isabs(path) and os.path.exists(path)


def _get_perf_dump_path() -> str:
    path = os.environ.get("PERF_DUMP_PATH", "")
    if path and _validate_path(path):
        return path
    raise RuntimeError("PERF_DUMP_PATH is empty or invalid: set it to an existing absolute directory for the step "
                       "time logs")


def delete_pref_pt_logs(perf_dump_path: str, device_id: Any) -> None:
    """Remove the step logs of device `device_id` an earlier run left in `perf_dump_path` (never a symlink)."""
    for name in glob.glob(os.path.join(perf_dump_path, f"perf_pt_*_{device_id}.log*")):
        if os.path.islink(name):
            continue
        try:
            os.remove(name)
        except OSError as exc:
            raise RuntimeError(f"Failed to delete {name}. Please delete it manually.") from exc


def _get_uuid() -> str:
    """The run's identifier shared by its processes: MASTER_ADDR_MASTER_PORT, else the single-host default."""
    addr, port = os.environ.get("MASTER_ADDR"), os.environ.get("MASTER_PORT")
    return "127.0.0.1_8888" if addr is None or port is None else f"{addr}_{port}"


def _setup_logger(name: str, path: str) -> None:
    logger = logging.getLogger(name)
    logger.setLevel(logging.INFO)
    handler = _StepLogHandler(path, maxBytes=50 * 1024 * 1024, backupCount=3)
    handler.setLevel(logging.INFO)
    handler.setFormatter(logging.Formatter("%(message)s"))
    logger.addHandler(handler)
    logger.propagate = False


def _open_log() -> None:
    path = _get_perf_dump_path()
    device = torch.npu.current_device()  # type: ignore[attr-defined]
    delete_pref_pt_logs(path, device)
    perf_dump_state.local_uuid = uuid.uuid4()
    perf_dump_state.uuid = _get_uuid()
    perf_dump_state.log_file_name = os.path.join(path, f"perf_pt_{os.getpid()}_{device}.log")
    _setup_logger(_LOGGER, perf_dump_state.log_file_name)
    logger = logging.getLogger(_LOGGER)
    for line in _header().splitlines():
        logger.info("%s", line)
    os.chmod(perf_dump_state.log_file_name, _PERMISSION)
    perf_dump_state.has_log = True


def _perf_dump_decorator(func: Any) -> Any:
    """`func` (a Module.__call__) logging a step at each outermost call of a top-level, non-loss module while the
    step log is on (and the device initialized)."""

    @functools.wraps(func)
    def wrapper(self: Any, *args: Any, **kwargs: Any) -> Any:
        device = getattr(torch, "npu", None)
        if not perf_dump_enable or device is None or not device.is_initialized():
            return func(self, *args, **kwargs)
        if not perf_dump_state.has_log:
            _open_log()
        outer = perf_dump_state.is_outer_call
        if outer:
            if not perf_dump_state.is_child_module(self) and not _is_loss_module(self):
                now = int(time.time() * 1000)
                if perf_dump_state.last_time is not None:
                    logging.getLogger(_LOGGER).info("[STEPTIME]:%s,%s", perf_dump_state.last_time, now)
                perf_dump_state.last_time = now
                perf_dump_state.add_module_dict(self)
            perf_dump_state.is_outer_call = False
        try:
            return func(self, *args, **kwargs)
        finally:
            if outer:
                perf_dump_state.is_outer_call = True

    return wrapper


def _parse_config(config: str | None) -> dict[str, str]:
    """'key:value,key:value' (PERF_DUMP_CONFIG, NPU_ASD_CONFIG) as a dict; malformed items are skipped."""
    found: dict[str, str] = {}
    for item in (config or "").split(","):
        parts = item.split(":")
        if len(parts) == 2:
            found[parts[0]] = parts[1]
    return found


def _prase_asd_config(asd_config: dict[str, str]) -> None:
    """Validate and record NPU_ASD_CONFIG's values (the vendor's name, typo included): with_checksum must be
    'true' or 'false'; a number out of range warns and keeps its default."""
    checksum = asd_config.get("with_checksum", "false")
    if checksum not in ("true", "false"):
        raise ValueError("NPU_ASD_CONFIG-with_checksum should be true or false. For details, 0 as `with checksum "
                         "closed`, 1 as `with checksum opened`.")
    asd_settings["with_checksum"] = checksum == "true"
    for name, (default, smallest) in _ASD_NUMBERS.items():
        value = asd_config.get(name, str(default))
        if value.isdigit() and int(value) >= smallest:
            asd_settings[name] = int(value)
        else:
            warnings.warn(f"NPU_ASD_CONFIG-{name} is invalid; using the default value of {default}.", stacklevel=2)
            asd_settings[name] = default


_original_call = torch.nn.Module.__call__


def add_perf_dump_patch() -> None:
    """Read PERF_DUMP_CONFIG and NPU_ASD_CONFIG as torch_npu does at import; with the step log on, Module.__call__
    logs steps."""
    global perf_dump_enable
    perf_dump_enable = _parse_config(os.getenv("PERF_DUMP_CONFIG")).get("enable", "false").lower() == "true"
    asd = os.getenv("NPU_ASD_CONFIG")
    if asd is not None:
        config = _parse_config(asd)
        enable = config.get("enable", "false")
        if enable not in ("true", "false"):
            raise ValueError("NPU_ASD_CONFIG-enable should be true or false. For details, false as `ASD closed`, "
                             "true as `ASD opened`.")
        if enable == "true":
            _prase_asd_config(config)
    if perf_dump_enable:
        torch.nn.Module.__call__ = _perf_dump_decorator(_original_call)  # type: ignore[method-assign]


__all__ = ["PerfDumpState", "_get_perf_dump_path", "_get_uuid", "_is_loss_module", "_parse_config",
           "_perf_dump_decorator", "_prase_asd_config", "_setup_logger", "_validate_path", "add_perf_dump_patch",
           "asd_settings", "delete_pref_pt_logs", "perf_dump_state"]
