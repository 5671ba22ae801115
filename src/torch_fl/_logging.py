"""torch_fl loggers: quiet by default (WARNING and above reach the user), per-module levels via FL_LOG.

``FL_LOG="dispatch=DEBUG,compile=INFO"`` sets ``torch_fl.dispatch`` and ``torch_fl.compile``;
a bare level (``FL_LOG=DEBUG``) sets the whole ``torch_fl`` tree.
"""

from __future__ import annotations

import logging

from . import _env
from .errors import ConfigError, did_you_mean

ROOT = "torch_fl"
LEVELS = ("CRITICAL", "ERROR", "WARNING", "INFO", "DEBUG")
_handler: logging.Handler | None = None


def parse_levels(text: str) -> dict[str, int]:
    """'dispatch=DEBUG,compile=INFO' -> {'torch_fl.dispatch': 10, 'torch_fl.compile': 20}."""
    levels: dict[str, int] = {}
    for item in filter(None, (part.strip() for part in text.split(","))):
        module, _, level = item.rpartition("=")
        level = level.strip().upper()
        if level not in LEVELS:
            raise ConfigError(f"FL_LOG: '{level}' is not a log level; use one of {', '.join(LEVELS)}."
                              + did_you_mean(level, LEVELS))
        name = ROOT if not module.strip() else f"{ROOT}.{module.strip().removeprefix(ROOT + '.')}"
        levels[name] = getattr(logging, level)
    return levels


def configure(text: str | None = None) -> dict[str, int]:
    """Apply FL_LOG (or `text`): a stderr handler on the torch_fl logger, levels per module."""
    global _handler
    root = logging.getLogger(ROOT)
    if _handler is None:
        _handler = logging.StreamHandler()
        _handler.setFormatter(logging.Formatter("[%(name)s] %(levelname)s: %(message)s"))
        root.addHandler(_handler)
        root.propagate = False
        root.setLevel(logging.WARNING)
    levels = parse_levels(_env.FL_LOG.get() if text is None else text)
    for name, level in levels.items():
        logging.getLogger(name).setLevel(level)
    return levels
