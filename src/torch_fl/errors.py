"""Exception types. Every message says what happened, why, and how to fix it."""

from __future__ import annotations

import difflib
from collections.abc import Iterable


def did_you_mean(name: str, candidates: Iterable[str]) -> str:
    """Return ``" Did you mean 'x'?"`` for the closest candidate, or ``""`` when none is close."""
    matches = difflib.get_close_matches(name, list(candidates), n=1, cutoff=0.5)
    return f" Did you mean '{matches[0]}'?" if matches else ""


class TorchFLError(Exception):
    """Base class of every torch-fl error."""


class DeviceNotFoundError(TorchFLError, ValueError):
    """A device id that does not name a device of this machine."""


class DescriptionError(TorchFLError, ValueError):
    """A device description file that does not load or validate."""

    def __init__(self, message: str, *, path: str | None = None, line: int | None = None,
                 key: str | None = None):
        where = path or "<description>"
        if line is not None:
            where += f":{line}"
        prefix = f"{where}: " + (f"[{key}] " if key else "")
        super().__init__(prefix + message)
        self.path, self.line, self.key = path, line, key


class UnknownDescriptionError(TorchFLError, LookupError):
    """No description of that name was found."""


class PluginImportError(TorchFLError, ImportError):
    """A vendor plugin named by a description failed to import."""


class TorchVersionError(TorchFLError, RuntimeError):
    """A feature needs a newer torch than the one installed."""


class ConfigError(TorchFLError, ValueError):
    """A malformed FL_* variable or config file."""


class UnsupportedOperatorError(TorchFLError, NotImplementedError):
    """An operator whose route on this device is 'unsupported' (or whose translation failed)."""


class RuntimeUnsupportedError(TorchFLError, NotImplementedError):
    """The device's torch module offers nothing that implements a runtime call (torch.fl.synchronize, ...)."""


class VendorOpError(TorchFLError, RuntimeError, ValueError):
    """An emulated vendor fused op (torch_npu.npu_*) refused its inputs. A RuntimeError, as the vendor's kernels
    raise from C++ (its tests expect RuntimeError), and a ValueError, as the wrong value it is."""


class FallbackWarning(UserWarning):
    """An operator ran on the CPU because the device has no kernel for it (warned once per op)."""


# Errors of one tool each: defined here (one place; torch.fl exports them), raised by the module named.
class ScanConfigError(ConfigError):
    """A bad selector or a bad scan table (config.py, for `torchfl scan`)."""


class RouteLogError(TorchFLError, ValueError):
    """A route log (FL_ROUTE_LOG, `torch.fl.write_route_log`) that cannot be read."""


class CudaAliasError(TorchFLError, RuntimeError):
    """A torch.cuda call the CUDA alias does not cover (or refuses) failed; the message names the alias
    and the remedy of the CUDA-API table (migrate/cuda_surface.py)."""


class StreamRaceError(TorchFLError, RuntimeError):
    """The stream sanitizer (FL_SANITIZE=streams, torch.fl.sanitize()) found accesses of one tensor on two
    streams with no order between them, a free without record_stream, or a host access to an unfinished
    non-blocking copy; ``.reports`` holds each report (both accesses, their ops, streams and source lines)."""

    reports: list[str]

    def __init__(self, reports: list[str]) -> None:
        super().__init__("\n\n".join(reports))
        self.reports = list(reports)


class DistributedError(TorchFLError, RuntimeError):
    """A distributed setup that cannot work (mixed vendors without a common backend, no device)."""


class PreflightError(DistributedError):
    """The preflight found ranks that differ, or ranks that did not answer a checked collective."""


class RanksMissingError(DistributedError, TimeoutError):
    """init_process_group gave up waiting for ranks that never arrived (the message names them)."""


class CollectiveTimeoutError(TorchFLError, TimeoutError):
    """A collective did not finish within FL_COLLECTIVE_TIMEOUT (what the watchdog records)."""


class ModelSpecError(TorchFLError, ValueError):
    """A model entry point that cannot be loaded or does not follow the factory contract."""


class CompareError(TorchFLError, RuntimeError):
    """The two runs cannot be compared (different module calls, an output missing on one side)."""


class TraceError(TorchFLError, RuntimeError):
    """The model could not be traced without computing (for example Python branching on values)."""


class CacheLockTimeout(TorchFLError, TimeoutError):
    """The compile cache lock was not released in time."""


class CacheTrustError(TorchFLError, PermissionError):
    """A compile cache directory that another user could write: refused."""


class CacheUnusableError(TorchFLError, OSError):
    """A compile cache directory that cannot be used (read-only, full, not a directory): the message names
    the path and the fix; torch.fl.compile goes on without the cache."""


class AOTFingerprintError(TorchFLError, RuntimeError):
    """An AOT package built for another stack (or without a torch-fl fingerprint)."""

    def __init__(self, message: str, differences: dict[str, tuple[str, str]] | None = None):
        super().__init__(message)
        self.differences = differences or {}  # component -> (package value, this process's value)


class AOTIntegrityError(TorchFLError, RuntimeError):
    """An AOT package whose files differ from its record, or that is not the model the caller expects."""

    def __init__(self, message: str, problems: list[str] | None = None):
        super().__init__(message)
        self.problems = problems or []


class FileChanged(OSError):
    """`torchfl fix`: the file on disk is no longer the one that was read (an editor saved it while fix
    ran); the fix is not written over it."""
