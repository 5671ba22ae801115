"""The words torch-fl's layers share, in one place: route kinds, log levels and logger names, the virtual-id
pattern and the emulation prefix.

Base layer, importing nothing of torch-fl (nor torch): the settings layer (_env) checks FL_ROUTE, FL_LOG and
FL_DEVICE_MAP against these without importing routing or logging, and every other module reads the same
tuple instead of keeping a copy.
"""

from __future__ import annotations

import enum
import re


# Routes ------------------------------------------------------------------------------------------
class RouteKind(str, enum.Enum):
    """The five routes an operator can take on a device (docs/routing.md), in the order tables show them.

    A str: a kind equals its name (``RouteKind.NATIVE == "native"``), prints and formats as it, and JSON
    writes it as that string; so logs, reports and FL_ROUTE keep their words while code compares members
    (``route.kind is RouteKind.NATIVE``)."""

    NATIVE = "native"
    TRANSLATE = "translate"
    FALLBACK = "fallback"
    KERNEL = "kernel"
    UNSUPPORTED = "unsupported"

    def __str__(self) -> str:
        return self.value

    __format__ = str.__format__  # (f"{kind}" is its word on every Python, as str() is)

    def __repr__(self) -> str:
        # a printed route_stats() row reads {'route': 'kernel'}, not <RouteKind.KERNEL: 'kernel'> (issue 42)
        return repr(self.value)


ROUTES = tuple(kind.value for kind in RouteKind)  # the words, for messages and settings
# The same routes, worst first: a model's verdict is its worst route (coverage, grade).
ROUTE_SEVERITY = ("unsupported", "fallback", "translate", "kernel", "native")

# Logging -----------------------------------------------------------------------------------------
LOG_ROOT = "torch_fl"
LOG_LEVELS = ("CRITICAL", "ERROR", "WARNING", "INFO", "DEBUG")
# Every logger under torch_fl (tests/test_env.py checks this against the getLogger calls in src/), so that
# FL_LOG=dispach=DEBUG is an error with a did-you-mean instead of a silent no-op.
LOGGERS = ("compile", "description", "device", "dispatch", "distributed", "migrate", "plugins", "routing",
           "runtime")

# Devices -----------------------------------------------------------------------------------------
# acc0, acc1, ...: ASCII digits without leading zeros ('acc01' and 'acc١' are not ids; they get a hint).
VIRTUAL_ID = re.compile(r"^acc(0|[1-9][0-9]*)$")
# FL_DEVICE=emu:NAME emulates the chip NAME on the CPU; emu:N is the N-th emulated device.
EMULATION_PREFIX = "emu:"
# The emulated device's torch device type when it does not take a vendor's name (emu:npu registers 'npu').
EMULATED_TYPE = "emu"

