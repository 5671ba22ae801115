"""Every torch-fl setting, declared once: the ``FL_*`` environment variable, its config-file key, type,
allowed values, bounds, default, doc, and the one parser that turns a value into a typed one.

A setting comes from the environment (``FL_DEVICE``), else the project config (``device`` in the nearest
``torch_fl.toml`` / ``[tool.torch_fl]``), else the user config (``FL_CONFIG`` or
``~/.config/torch_fl/config.toml``), else its default. All three go through the same parser and checks
(``EnvVar.resolve`` says which source won; ``torchfl doctor`` shows it); ``config.py`` only reads files.

Callers ask a setting for its typed value (``FL_CACHE_KEEP.value()``); nothing else parses ``FL_*``
text, so the API, ``torchfl doctor`` (``problems()``) and docs/env.md (generated from ``ALL``) agree.
Values are read when asked for (not cached, never at import) so that tests and long-lived processes that
change the environment see the change; the dispatch hot path never calls into this module. A bad value is
a ``ConfigError`` naming the variable (or file and key), the value, what is allowed and, when one is close,
a did-you-mean. Numbers are ASCII digits only and bounded (``int('١٠')`` and ``int('1_0')`` are 10 in
Python, never in a setting).
"""

from __future__ import annotations

import difflib
import functools
import math
import os
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

from ._names import LOG_LEVELS, LOG_ROOT, LOGGERS, ROUTES, VIRTUAL_ID
from .errors import ConfigError, did_you_mean

# One vocabulary for booleans, case-insensitive; empty means "unset" (the default).
TRUE = ("1", "true", "yes", "on")
FALSE = ("0", "false", "no", "off")
_DOCS = "`torchfl docs env`"  # the page, shipped in the wheel (torch_fl/docs)
# re's \d and int()/float() accept every Unicode digit ('١٠' is 10) and '1_0'; settings take ASCII only.
_INT = re.compile(r"[0-9]{1,18}", re.ASCII)
_DECIMAL = re.compile(r"([0-9]{1,18}(\.[0-9]{0,18})?|\.[0-9]{1,18})", re.ASCII)


class Setting(NamedTuple):
    """A setting's typed value and where it came from: `source` is the variable name, a config file's
    path, or 'default'; `kind` is 'environment', 'project config', 'user config' or 'default'."""

    value: Any
    source: str
    kind: str
    text: str = ""  # the value as written (the variable's text, or the file's value)


@dataclass(frozen=True)
class EnvVar:
    name: str
    type: str  # how docs/env.md names the accepted shape ('bool', 'int >= 1', 'OP=ROUTE,...')
    default: str
    help: str
    allowed: tuple[str, ...] = ()
    see: str = ""  # the doc page with more (docs/env.md links it)
    parser: Callable[[EnvVar, Any, str], Any] | None = field(default=None, repr=False, compare=False)
    key: str = ""  # the config-file key of the same setting ('' : environment only)
    maximum: float | None = None  # the largest number a numeric setting accepts

    def text(self) -> str:
        """The raw text (stripped), the default when unset or empty; not validated."""
        return os.environ.get(self.name, "").strip() or self.default

    def get(self) -> str:
        """The text after validation (ConfigError when it does not parse). Prefer `value()`; this exists
        so that a caller that still reads the text never silently accepts a bad value."""
        text = self.text()
        self.parse(text)
        return text

    def is_set(self) -> bool:
        return bool(os.environ.get(self.name, "").strip())

    def value(self) -> Any:
        """The typed value of the current setting (ConfigError when it is not valid), from the
        environment, a config file or the default (see `resolve`)."""
        if not self.key:
            return self.parse(self.text())
        return self.resolve().value

    def parse(self, text: Any, origin: str | None = None) -> Any:
        """Parse `text` as this variable's type; `origin` names the source in errors (default: the
        variable, e.g. a config file for the same syntax). A config file's value may also be a TOML table
        (device_map, routes), a boolean or a number; it goes through the same parser."""
        if isinstance(text, str):
            text = text.strip() or self.default  # empty means unset, everywhere
        elif isinstance(text, bool):
            text = "1" if text else "0"
        elif isinstance(text, (int, float)):
            text = repr(text)
        elif not (isinstance(text, dict) and self.parser in _TABLES):
            kind = "a string or a table" if self.parser in _TABLES else "a string"
            raise ConfigError(f"{origin or self.name}: must be {kind} (the syntax of {self.name}), got "
                              f"{type(text).__name__} {_shorten(repr(text))}. Fix: see {_DOCS}.")
        return self.parser(self, text, origin or self.name) if self.parser else text

    def resolve(self) -> Setting:
        """The typed value and its source: the environment, else the project config, else the user
        config (for settings with a config key), else the default."""
        for found in self.layers():
            return found
        return Setting(self.parse(self.default), "default", "default", self.default)

    def layers(self, environment: bool = True) -> list[Setting]:
        """Every source that sets this setting, the one that wins first (environment, project config,
        user config). FL_ROUTE merges them per operator; every other setting takes the first."""
        found = []
        if environment and self.is_set():
            found.append(Setting(self.value_from_env(), self.name, "environment", self.text()))
        if self.key:
            for kind, config in config_files():
                if self.key in config.values:
                    origin = f"{config.path}: {self.key}"
                    raw = config.values[self.key]
                    written = ",".join(f"{k}={v}" for k, v in raw.items()) if isinstance(raw, dict) else str(raw)
                    value = self.parse(raw, origin)
                    if isinstance(value, Path) and not value.is_absolute():
                        value = Path(config.path).parent / value  # a path in a file is relative to that file
                    found.append(Setting(value, str(config.path), kind, written))
        return found

    def value_from_env(self) -> Any:
        return self.parse(self.text())

    def error(self, text: str, why: str, origin: str | None = None, *, candidates: tuple[str, ...] = (),
              near: str | None = None) -> ConfigError:
        """'FL_X: 'text' is <why>.' plus the allowed values, a did-you-mean and the fix."""
        message = f"{origin or self.name}: {_shorten(text)!r} is {why}."
        if candidates:
            message += _suggest(near if near is not None else text, candidates)
        where = self.name if origin is None or origin.startswith(self.name) else f"{origin} (or {self.name})"
        message += f" Fix: correct or unset {where} (see {_DOCS})."
        return ConfigError(message)


def _shorten(text: str) -> str:
    return text if len(text) <= 200 else text[:200] + f"... ({len(text)} characters)"


def _suggest(name: str, candidates: tuple[str, ...]) -> str:
    # Swapped letters (gleu -> gelu) first: difflib alone prefers the shorter 'glu'.
    swapped = [c for c in candidates if len(c) == len(name) and sorted(c) == sorted(name) and c != name]
    if swapped:
        return f" Did you mean '{swapped[0]}'?"
    close = difflib.get_close_matches(name, candidates, n=1, cutoff=0.6)  # 0.5 offers 'yes' for 'maybe'
    return f" Did you mean '{close[0]}'?" if close else ""


# Parsers: (var, text, origin) -> value --------------------------------------------------------------
def _text(var: EnvVar, text: str, origin: str) -> str:
    return text


_LONG_NUMBER = re.compile(r"\d{10,}")


def _device(var: EnvVar, text: str, origin: str) -> str:
    """A device spec (acc0, cuda:1, emu:NAME); what it names is resolved by torch_fl.device. Absurd
    values stop here: no device index has 10 digits."""
    if len(text) > 200 or _LONG_NUMBER.search(text):
        raise var.error(text, "not a device (a virtual id such as acc0, a torch device such as cuda:1, or "
                        "emu:NAME)", origin)
    return text


def _rank_devices(var: EnvVar, text: str, origin: str) -> dict[str, str]:
    """'emu:npu,emu:cuda' (by position: LOCAL_RANK 0, 1), '0=emu:npu,1=emu:cuda' (LOCAL_RANK) or
    'rank2=emu:mlu' (global RANK; wins over a LOCAL_RANK entry) -> {'local0': ..., 'rank2': ...}."""
    entries: dict[str, str] = {}
    for position, item in enumerate(part.strip() for part in text.split(",")):
        key, sep, value = item.partition("=")
        if not sep:
            key, value = str(position), item
        key, value = key.strip().lower(), value.strip()
        if not value:
            raise var.error(text, f"missing a device in entry {position + 1} (example: "
                            "FL_RANK_DEVICES='emu:npu,emu:cuda' or '0=emu:npu,rank1=emu:cuda')", origin)
        if key.isdigit():
            key = f"local{int(key)}"
        elif not re.fullmatch(r"rank\d{1,7}", key):
            raise var.error(key, "not a rank key: use N (LOCAL_RANK N) or rankN (global RANK N), as in "
                            "'0=emu:npu,rank1=emu:cuda'", origin)
        if key in entries:
            raise var.error(text, f"giving {key} twice; give each rank once", origin)
        entries[key] = _device(var, value, origin)
    return entries


def _bool(var: EnvVar, text: str, origin: str) -> bool:
    lowered = text.lower()
    if lowered in TRUE:
        return True
    if lowered in FALSE:
        return False
    raise var.error(text, f"neither on ({', '.join(TRUE)}) nor off ({', '.join(FALSE)})", origin,
                    candidates=TRUE + FALSE, near=lowered)


def _choice(var: EnvVar, text: str, origin: str) -> str:
    lowered = text.lower()
    if lowered in var.allowed:
        return lowered
    raise var.error(text, f"not one of: {', '.join(var.allowed)}", origin, candidates=var.allowed, near=lowered)


def _positive_int(var: EnvVar, text: str, origin: str) -> int:
    top = int(var.maximum) if var.maximum is not None else 10**18
    number = int(text) if _INT.fullmatch(text) else 0
    if not 1 <= number <= top:
        raise var.error(text, f"not a whole number >= 1 (at most {top}, in ASCII digits; example: "
                        f"{var.default})", origin)
    return number


def _seconds(var: EnvVar, text: str, origin: str) -> float:
    top = var.maximum if var.maximum is not None else 1e9
    seconds = float(text) if _DECIMAL.fullmatch(text) else -1.0
    if not (math.isfinite(seconds) and 0 <= seconds <= top):
        raise var.error(text, f"not a number of seconds >= 0 (at most {top:g}, in ASCII digits; example: "
                        f"{var.default}; 0 keeps torch's default timeout and turns the watchdog off)", origin)
    return seconds


def _path(var: EnvVar, text: str, origin: str) -> Path | None:
    if not text:
        return None
    # The OS would answer with "File name too long" from deep inside whatever first touches the path.
    longest = max((len(os.fsencode(part)) for part in Path(text).parts), default=0)
    if longest > 255 or len(os.fsencode(text)) > 4096:
        raise var.error(text, "too long to be a path (at most 255 bytes per name, 4096 in all)", origin)
    try:
        return Path(text).expanduser()
    except RuntimeError:  # '~nosuchuser/x', or '~/x' without HOME and without a password entry
        user = Path(text).parts[0][1:]
        why = (f"not a path here: '~{user}' names no user of this machine" if user else
               "not a path here: '~' cannot be expanded (HOME is not set and this user has no password "
               "entry)")
        raise var.error(text, f"{why}; write the folder out in full (e.g. /home/NAME/x) or use a user "
                        "that exists", origin) from None


def _paths(var: EnvVar, text: str, origin: str) -> list[Path]:
    return [_path(var, part.strip(), origin) for part in text.split(os.pathsep) if part.strip()]


def _output_file(var: EnvVar, text: str, origin: str) -> Path | None:
    """A file written later (at exit): its folder must exist now, so the output is not lost at the end."""
    path = _path(var, text, origin)
    if path is None:
        return None
    if path.is_dir():
        raise var.error(text, "a folder; name a file inside it (example: route-log.json)", origin)
    if not path.parent.is_dir():
        raise var.error(text, f"in a folder that does not exist ({path.parent}); create the folder first "
                        f"(mkdir -p {path.parent}) or choose another path", origin)
    return path


def pairs(var: EnvVar, text: str | dict[str, Any], origin: str, example: str) -> dict[str, str]:
    """'K=V,K=V' -> {K: V}; every item needs both sides and a key may appear once. A config file's TOML
    table of strings is taken item by item, so it meets the same checks."""
    if isinstance(text, dict):
        for key, value in text.items():
            if not isinstance(value, str) or not value.strip() or not key.strip():
                left, _, right = example.split(",")[0].partition("=")
                raise var.error(f"{key} = {value!r}", "not a key with a string value (example: "
                                f'{var.key} = {{ "{left}" = "{right}" }})', origin)
        return {key.strip(): value.strip() for key, value in text.items()}
    found: dict[str, str] = {}
    for item in filter(None, (part.strip() for part in text.split(","))):
        key, sep, value = (s.strip() for s in item.rpartition("="))
        if not sep or not key or not value:
            raise var.error(item, f"not of the form {example.split('=')[0]}=VALUE (example: "
                            f"{var.name}='{example}')", origin)
        if key in found:
            raise var.error(text, f"setting '{key}' twice ('{found[key]}' and '{value}'); give each key "
                            "once", origin)
        found[key] = value
    return found


def _device_map(var: EnvVar, text: str, origin: str) -> dict[str, str]:
    """'acc0=cuda:1,acc1=cpu' -> {'acc0': 'cuda:1', ...}; the physical names are checked by
    torch_fl.device, which turns them into torch.devices."""
    mapping = pairs(var, text, origin, "acc0=cuda:1,acc1=cpu")
    for key in mapping:
        if not VIRTUAL_ID.match(key):
            raise var.error(key, "not a virtual id like acc0 (example: FL_DEVICE_MAP='acc0=cuda:1,acc1=cpu')",
                            origin)
    return mapping


@functools.cache
def _aten_names() -> tuple[frozenset[str], frozenset[str]]:
    import torch

    names = frozenset(n for n in torch._C._dispatch_get_all_op_names() if n.startswith("aten::"))
    return names, frozenset(n.split(".", 1)[0] for n in names)


def check_op(var: EnvVar, op: str, origin: str) -> str:
    """An op name of the FL_ROUTE syntax, with 'aten::' added to a bare name. aten ops are checked against
    the dispatcher (every aten op is registered when torch loads); other namespaces (custom ops) may be
    registered later, so they are taken as written."""
    name = op if "::" in op else f"aten::{op}"
    namespace, _, rest = name.partition("::")
    if not re.match(r"^[A-Za-z_]\w*$", namespace) or not re.match(r"^[A-Za-z_]\w*(\.\w+)?$", rest):
        raise var.error(op, "not an operator name ('aten::name' for every overload, 'aten::name.overload' "
                        "for one)", origin)
    if namespace != "aten":
        return name
    full, bases = _aten_names()
    base, _, overload = name.partition(".")
    if base not in bases:
        raise var.error(op, "not an aten operator of this torch", origin, candidates=tuple(sorted(bases)),
                        near=base)
    if overload and overload != "default" and name not in full:
        overloads = tuple(sorted(n for n in full if n.startswith(base + ".")))
        listing = ", ".join(n.split(".", 1)[1] for n in overloads) or "none besides default"
        raise var.error(op, f"not an overload of {base} (its overloads: {listing})", origin,
                        candidates=overloads, near=name)
    return name


def _routes(var: EnvVar, text: str, origin: str) -> dict[str, str]:
    """'aten::gelu=translate,aten::bmm.default=fallback' -> {op: route}; ops checked by `check_op`."""
    routes: dict[str, str] = {}
    for op, kind in pairs(var, text, origin, "aten::gelu=translate").items():
        name = check_op(var, op, origin)
        if name in routes:
            raise var.error(text, f"setting {name} twice; give each operator once", origin)
        if kind not in ROUTES:
            raise var.error(kind, f"not a route (for {name}); routes: {', '.join(ROUTES)}", origin,
                            candidates=ROUTES)
        routes[name] = kind
    return routes


_TABLES = (_device_map, _routes)  # parsers that also take a config file's TOML table


def _log_levels(var: EnvVar, text: str, origin: str) -> dict[str, int]:
    """'dispatch=DEBUG,compile=INFO' -> {'torch_fl.dispatch': 10, ...}; a bare level sets every logger."""
    import logging

    levels: dict[str, int] = {}
    for item in filter(None, (part.strip() for part in text.split(","))):
        module, _, level = (s.strip() for s in item.rpartition("="))
        if level.upper() not in LOG_LEVELS:
            raise var.error(level, f"not a log level; levels: {', '.join(LOG_LEVELS)}", origin, candidates=LOG_LEVELS,
                            near=level.upper())
        module = module.removeprefix(LOG_ROOT).lstrip(".")
        if module and module.split(".")[0] not in LOGGERS:
            raise var.error(module, f"not a torch_fl logger; loggers: {', '.join(LOGGERS)}", origin,
                            candidates=LOGGERS)
        name = f"{LOG_ROOT}.{module}" if module else LOG_ROOT
        if name in levels:
            raise var.error(text, f"setting '{module or LOG_ROOT}' twice; give each logger once", origin)
        levels[name] = getattr(logging, level.upper())
    return levels


# The table ------------------------------------------------------------------------------------------
FL_DEVICE = EnvVar("FL_DEVICE", "device", "", "Device used by torch.fl.device() with no argument (default "
                   "acc0). Accepts a virtual id (acc0), a physical name (cuda:1, cpu) or emu:NAME.", parser=_device, key="device")
FL_RANK_DEVICES = EnvVar("FL_RANK_DEVICES", "DEVICE,... or [rank]N=DEVICE,...", "", "Each process's device in "
                         "one launch whose ranks use different chips: by LOCAL_RANK (position, or N=DEVICE) or "
                         "by global RANK (rankN=DEVICE), e.g. 'emu:npu,emu:cuda,emu:mlu'. FL_DEVICE wins when "
                         "set.", see="distributed.md", parser=_rank_devices)
FL_DEVICE_MAP = EnvVar("FL_DEVICE_MAP", "accN=DEVICE,...", "", "Explicit virtual-to-physical map, e.g. "
                       "'acc0=cuda:1,acc1=cpu'. Overrides config files and auto-detection.", parser=_device_map, key="device_map")
FL_BACKEND = EnvVar("FL_BACKEND", "description name", "", "Force the backend (a description name: cpu, "
                    "cuda, npu, ...) instead of auto-detection.", parser=_text, key="backend")
FL_DESCRIPTION = EnvVar("FL_DESCRIPTION", "path", "", "Path of one description file to load last "
                        "(it overrides a description of the same name).", see="descriptions.md", parser=_path)
FL_DESCRIPTION_PATH = EnvVar("FL_DESCRIPTION_PATH", "paths", "", "os.pathsep-separated directories "
                             "searched for *.toml description files.", see="descriptions.md", parser=_paths)
FL_CONFIG = EnvVar("FL_CONFIG", "path", "", "Path of the user config file "
                   "(default ~/.config/torch_fl/config.toml).", parser=_path)
FL_LOG = EnvVar("FL_LOG", "[LOGGER=]LEVEL,...", "", "Per-module log levels, e.g. 'dispatch=DEBUG,"
                "compile=INFO'; a bare level ('DEBUG') applies to every torch_fl logger. Applied when "
                "torch_fl is imported; a bad value is a warning there (never an import error).",
                parser=_log_levels, key="log")
FL_ROUTE = EnvVar("FL_ROUTE", "OP=ROUTE,...", "", "Per-op route overrides, e.g. 'aten::gelu=translate,"
                  "aten::bmm.default=fallback'; a bare name covers every overload. aten ops must exist in "
                  "this torch.", see="routing.md", parser=_routes, key="routes")
FL_ROUTE_LOG = EnvVar("FL_ROUTE_LOG", "file path (its folder must exist)", "", "Write the non-native call counts as JSON to this path "
                      "at exit. Its folder must exist when routing starts; if the write fails at exit, the "
                      "log goes to stderr.", see="routing.md", parser=_output_file)
FL_FALLBACK = EnvVar("FL_FALLBACK", "choice", "warn", "'error' turns every CPU fallback into an error "
                     "(strict mode for CI); 'warn' (the default) runs it on the CPU with a warning.",
                     allowed=("warn", "error"), see="routing.md", parser=_choice, key="fallback")
FL_CACHE_DIR = EnvVar("FL_CACHE_DIR", "path", "", "Root of the compile cache; overrides the description's "
                      "compile.cache_dir.", see="compile.md", parser=_path, key="cache_dir")
FL_CACHE_KEEP = EnvVar("FL_CACHE_KEEP", "int 1..1000", "3", "How many compile cache entries (fingerprints) to "
                       "keep per description, the current one included; older ones are removed.",
                       see="compile.md", parser=_positive_int, key="cache_keep", maximum=1000)
FL_CUDA_ALIAS = EnvVar("FL_CUDA_ALIAS", "bool", "0", "Set to 1 to run CUDA-hard-coded code on "
                       "torch.fl.device() in any process that imports torch (the torch.backends autoload "
                       "hook), without importing torch_fl.", see="migrate-runtime.md", parser=_bool)
FL_PREFLIGHT = EnvVar("FL_PREFLIGHT", "bool", "1", "Set to 0 to skip the distributed preflight of "
                      "torch.fl.distributed.init_process_group (rank consistency, checked collectives).",
                      see="distributed.md", parser=_bool, key="preflight")
FL_COLLECTIVE_TIMEOUT = EnvVar("FL_COLLECTIVE_TIMEOUT", "seconds 0..604800", "600", "Seconds a collective may "
                               "take before the watchdog ends the process with a diagnosis; 0 keeps torch's "
                               "default timeout and turns the watchdog off.", see="distributed.md", parser=_seconds,
                               key="collective_timeout", maximum=7 * 24 * 3600.0)
FL_SANITIZE = EnvVar("FL_SANITIZE", "choice", "off", "'streams' checks the stream order of every op on an "
                     "emulated chip from its registration on (races, frees without record_stream, host reads of "
                     "unfinished non-blocking copies, device work in a forked child), as torch.fl.sanitize() "
                     "does; 'off' (the default) costs nothing.", allowed=("off", "streams"), see="streams.md",
                     parser=_choice, key="sanitize")
FL_EMU_DEVICES = EnvVar("FL_EMU_DEVICES", "int 1..1024", "1", "How many emulated devices FL_DEVICE=emu:NAME "
                        "(or torch.fl.emulate) gives: acc0..accN-1 as emu:0..emu:N-1.", parser=_positive_int,
                        key="emu_devices", maximum=1024)

ALL: tuple[EnvVar, ...] = (
    FL_DEVICE, FL_RANK_DEVICES, FL_DEVICE_MAP, FL_BACKEND, FL_DESCRIPTION, FL_DESCRIPTION_PATH, FL_CONFIG, FL_LOG,
    FL_ROUTE, FL_ROUTE_LOG, FL_FALLBACK, FL_CACHE_DIR, FL_CACHE_KEEP,
    FL_CUDA_ALIAS, FL_PREFLIGHT, FL_COLLECTIVE_TIMEOUT, FL_EMU_DEVICES, FL_SANITIZE,
)
BY_NAME: dict[str, EnvVar] = {var.name: var for var in ALL}


def rank_known() -> bool:
    """Whether this process knows its rank yet: torchrun sets RANK/LOCAL_RANK before the interpreter
    starts, a spawn launcher (mp.spawn, torch.distributed.elastic with start_method='spawn') only inside
    the worker function, after `import torch`."""
    return bool(os.environ.get("RANK", "").strip() or os.environ.get("LOCAL_RANK", "").strip())


def device_choice() -> tuple[str, str]:
    """(device text, where it came from) set for this process in the environment: FL_DEVICE, else this
    rank's FL_RANK_DEVICES entry (global RANK first, then LOCAL_RANK; a process not started by a
    launcher is local rank 0); ('', '') when neither is set."""
    value = FL_DEVICE.get()
    if value or not FL_RANK_DEVICES.is_set():
        return value, FL_DEVICE.name if value else ""
    entries = FL_RANK_DEVICES.value()
    rank, local = os.environ.get("RANK", "").strip(), os.environ.get("LOCAL_RANK", "").strip()
    for key, label in ((f"rank{rank}", f"RANK={rank}"), (f"local{local or rank or 0}",
                                                         f"LOCAL_RANK={local or rank or 0}")):
        if key in entries:
            return entries[key], f"{FL_RANK_DEVICES.name} ({label})"
    have = ", ".join(entries)
    raise ConfigError(f"{FL_RANK_DEVICES.name}: no entry for this process (RANK={rank or 'unset'}, LOCAL_RANK="
                      f"{local or 'unset'}); it has {have}. Fix: give one device per rank the launcher starts "
                      f"(torchrun --nproc-per-node N needs N entries), or set FL_DEVICE for every rank (see {_DOCS}).")
BY_KEY: dict[str, EnvVar] = {var.key: var for var in ALL if var.key}
# The config-file keys: one per setting above, plus the `torchfl scan` table (config.load_scan_config).
CONFIG_KEYS: tuple[str, ...] = (*BY_KEY, "scan")


# Config files (read by torch_fl.config, checked here) -----------------------------------------------
# The files last checked and what config_files() made of them.
_CHECKED: tuple[tuple[Any, Any], tuple[tuple[str, Any], ...]] | None = None
# Readings pinned by `one_reading` (innermost last; None until the first lookup reads the files).
_PINNED: list[tuple[tuple[str, Any], ...] | None] = []


class one_reading:  # (lower case: used as a context manager, like contextlib's)
    """Read the config files once for the duration: resolving one device asks for three or four keys,
    and each lookup would stat the files again (torch.fl.device() is called per step in user code)."""

    def __enter__(self) -> None:
        _PINNED.append(None)  # read lazily: with FL_DEVICE set, resolving reads no file

    def __exit__(self, *exc: object) -> None:
        _PINNED.pop()


_CONFIG_MODULE: Any = None  # torch_fl.config, once config_files has imported it


def config_files() -> list[tuple[str, Any]]:
    """[('project config', ConfigFile), ('user config', ConfigFile)], the files that exist, each with its
    keys checked (an unknown key is an error with a did-you-mean, the same in both)."""
    global _CHECKED
    if _PINNED and _PINNED[-1] is not None:
        return list(_PINNED[-1])
    global _CONFIG_MODULE
    config = _CONFIG_MODULE
    if config is None:  # (imported once: a function-level import costs four calls on every lookup)
        from . import config
        _CONFIG_MODULE = config

    user = FL_CONFIG.value()  # (the files are read here with the path it names: config never reads FL_*)
    files = (config.project_config(), config.user_config(user))
    checked = _CHECKED
    # The reader returns the same ConfigFile while a file is unchanged: its keys were checked already.
    if checked is not None and checked[0][0] is files[0] and checked[0][1] is files[1]:
        if _PINNED:
            _PINNED[-1] = checked[1]
        return list(checked[1])
    found = []
    for kind, file in zip(("project config", "user config"), files, strict=True):
        if file.path is None:
            continue
        for key, value in file.values.items():
            if key not in CONFIG_KEYS:
                raise ConfigError(f"{file.path}: unknown key '{key}'.{did_you_mean(key, CONFIG_KEYS)} "
                                  f"Known keys: {', '.join(CONFIG_KEYS)} (see {_DOCS}).")
            if key == "scan" and not isinstance(value, dict):
                raise ConfigError(f"{file.path}: 'scan' must be a table, e.g. [tool.torch_fl.scan]")
        found.append((kind, file))
    _CHECKED = (files, tuple(found))
    if _PINNED:
        _PINNED[-1] = _CHECKED[1]
    return found


def config_value(key: str) -> tuple[Any, str] | None:
    """The value of config key `key` from the project file, else the user file, with the file's path;
    parsed and checked by the same parser as its FL_* variable (None: no file sets it)."""
    for found in BY_KEY[key].layers(environment=False):
        return found.value, found.source
    return None


def settings() -> list[tuple[EnvVar, Setting | ConfigError]]:
    """Every setting that is set somewhere, with its value and source, or the error it gives (doctor)."""
    rows: list[tuple[EnvVar, Setting | ConfigError]] = []
    for var in ALL:
        try:
            found = var.layers()
        except ConfigError as exc:
            rows.append((var, exc))
            continue
        if found:
            rows.append((var, found[0]))
    return rows


def markdown_table() -> str:
    """The variable table of docs/env.md (tests/test_env.py checks the page contains exactly this)."""
    rows = ["| variable | config key | type | default | meaning |", "| --- | --- | --- | --- | --- |"]
    for var in ALL:
        kind = f"one of {', '.join(var.allowed)}" if var.allowed else var.type
        see = f" See [{var.see}]({var.see})." if var.see else ""
        key = f"`{var.key}`" if var.key else "(environment only)"
        rows.append(f"| `{var.name}` | {key} | {kind} | {f'`{var.default}`' if var.default else '(unset)'} | "
                    f"{var.help}{see} |")
    return "\n".join(rows)


# Validation (torchfl doctor) ------------------------------------------------------------------------
def problems(environ: Mapping[str, str] | None = None, *, files: bool = True) -> list[ConfigError]:
    """The error of every FL_* variable that is set and does not parse, in table order, then (with
    `files`) those of the config files' keys: the same checks for both."""
    environ = os.environ if environ is None else environ
    found = []
    for var in ALL:
        text = environ.get(var.name, "").strip()
        if not text:
            continue
        try:
            var.parse(text)
        except ConfigError as exc:
            found.append(exc)
    if not files:
        return found
    try:
        configs = config_files()
    except ConfigError as exc:
        return [*found, exc]
    for _kind, file in configs:
        for key, value in file.values.items():
            if key in BY_KEY:
                try:
                    BY_KEY[key].parse(value, f"{file.path}: {key}")
                except ConfigError as exc:
                    found.append(exc)
    return found


def unknown(environ: Mapping[str, str] | None = None) -> list[str]:
    """Set FL_* variables torch-fl does not read (typos), each with a did-you-mean when one is close."""
    environ = os.environ if environ is None else environ
    return [f"{name} is set but torch-fl reads no such variable.{did_you_mean(name, BY_NAME)}"
            for name in sorted(environ) if name.startswith("FL_") and name not in BY_NAME]
