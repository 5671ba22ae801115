"""torch_fl loggers: quiet by default (WARNING and above reach the user), per-module levels via FL_LOG
(or the config files' ``log`` key).

``FL_LOG="dispatch=DEBUG,compile=INFO"`` sets ``torch_fl.dispatch`` and ``torch_fl.compile``;
a bare level (``FL_LOG=DEBUG``) sets the whole ``torch_fl`` tree. The syntax is parsed by
``_env.FL_LOG`` (the one parser of FL_* values).
"""

from __future__ import annotations

import logging

from . import _env
from ._names import LOG_LEVELS, LOG_ROOT
from ._names import LOGGERS as _LOGGERS
from .errors import ConfigError

# The logger names and levels are _names' (the env layer checks FL_LOG against them); re-exported here.
ROOT, LEVELS, LOGGERS = LOG_ROOT, LOG_LEVELS, _LOGGERS
_handler: logging.Handler | None = None
_log = logging.getLogger(ROOT)


def parse_levels(text: str) -> dict[str, int]:
    """'dispatch=DEBUG,compile=INFO' -> {'torch_fl.dispatch': 10, 'torch_fl.compile': 20}."""
    return _env.FL_LOG.parse(text)


def configure(text: str | None = None, *, strict: bool = False) -> dict[str, int]:
    """Apply FL_LOG (or `text`): a stderr handler on the torch_fl logger, levels per module.

    Runs at ``import torch_fl``, so a bad FL_LOG must not make the import (or ``torchfl --help``) fail:
    unless `strict`, it is reported as one warning and ignored; `torchfl doctor` lists it as a problem."""
    global _handler
    if _handler is None:
        _handler = logging.StreamHandler()
        _handler.setFormatter(logging.Formatter("[%(name)s] %(levelname)s: %(message)s"))
        _log.addHandler(_handler)
        _log.propagate = False
        _log.setLevel(logging.WARNING)
    try:
        # FL_LOG, else the config files' `log` key (the same parser): both are applied here
        levels = _env.FL_LOG.value() if text is None else parse_levels(text)
    except ConfigError as exc:
        if strict:
            raise
        _log.warning("%s The log levels are ignored until then.", exc)
        return {}
    for name, level in levels.items():
        logging.getLogger(name).setLevel(level)
    return levels


def debugging() -> bool:
    """Whether FL_LOG asks for DEBUG on the whole torch_fl tree (the CLI then shows tracebacks)."""
    return _log.isEnabledFor(logging.DEBUG)
