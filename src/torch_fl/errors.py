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


class FallbackWarning(UserWarning):
    """An operator ran on the CPU because the device has no kernel for it (warned once per op)."""
