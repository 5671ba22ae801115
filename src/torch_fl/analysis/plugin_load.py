"""Import a vendor plugin in a child process, so a plugin that crashes cannot take the caller with it
(``torchfl doctor``, ``torchfl doctor --bisect-env``).

`load` runs ``import PLUGIN`` in a fresh interpreter (this Python, this environment, or the one given) and
turns every way that can end into a :class:`LoadResult`: imported; a Python exception (a missing ``.so``,
an undefined symbol, a glibc or libstdc++ version the host lacks, ``No module named`` for a package built
for another Python); killed by a signal (SIGSEGV, SIGABRT) in the plugin's native code; or stuck (a time
limit, after which the child prints where it was). Besides the child's own report it reads the dynamic
loader's diagnostics (``LD_DEBUG=libs,files`` written to a file: which library it was looking for, where it
looked, which library's initialiser ran last) and compares the plugin's binaries with the host
(`abi_facts`: the Python ABI tag, the glibc and libstdc++ symbol versions the binaries need against those
the host provides). `LoadResult.problem` says what happened, why and the fix.
"""

from __future__ import annotations

import glob
import importlib.util
import json
import mmap
import os
import re
import signal
import subprocess
import sys
import sysconfig
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

# Runs in the child. It reports through a file, not stdout, so whatever the plugin prints cannot garble
# it; stderr gets a marker around each extension module's loading, which names the module whose
# initialisation was running when a signal killed the process.
_CHILD = r"""
import faulthandler, importlib, importlib.machinery as machinery, json, os, sys, traceback
name, out, limit = sys.argv[1], sys.argv[2], float(sys.argv[3])
faulthandler.enable()
faulthandler.dump_traceback_later(limit, exit=True)

def _wrap(method):
    original = getattr(machinery.ExtensionFileLoader, method)
    def wrapped(self, *args):
        os.write(2, ("\n[torch-fl] loading extension %s\n" % self.path).encode())
        result = original(self, *args)
        os.write(2, ("\n[torch-fl] loaded extension %s\n" % self.path).encode())
        return result
    setattr(machinery.ExtensionFileLoader, method, wrapped)

_wrap("create_module")
_wrap("exec_module")
try:
    module = importlib.import_module(name)
    report = {"ok": True, "origin": getattr(module, "__file__", "") or "",
              "version": str(getattr(module, "__version__", "") or "")}
except BaseException as exc:
    report = {"ok": False, "type": type(exc).__name__, "message": str(exc),
              "name": getattr(exc, "name", None) or "", "path": getattr(exc, "path", None) or "",
              "traceback": traceback.format_exception(exc)[-8:]}
faulthandler.cancel_dump_traceback_later()
with open(out, "w") as f:
    json.dump(report, f)
"""

DEFAULT_TIMEOUT = 120.0  # torch_npu's import (torch, CANN's libraries) takes seconds; a hang is minutes
_GRACE = 15.0  # after the child's own limit, before it is killed from outside
_LOADING = re.compile(r"^\[torch-fl\] (loading|loaded) extension (.+)$", re.M)
_MISSING_SO = re.compile(r"(\S+\.so[.\d]*): cannot open shared object file")
_UNDEFINED = re.compile(r"undefined symbol: (\S+)")
_VERSION_NEEDED = re.compile(r"version [`'](\S+?)' not found \(required by ([^)]+)\)")
_SO_TAG = re.compile(r"\.(cpython-(\d)(\d+)[a-z]*|abi3|pypy\S*?)-?[^.]*\.so$")
_SYMVER = {name: re.compile(rb"\b" + name.encode() + rb"_([0-9]+(?:\.[0-9]+)+)\b")
           for name in ("GLIBC", "GLIBCXX", "CXXABI")}
_SCAN_LIMIT = 2 << 30  # bytes of plugin binaries read for symbol versions (torch_npu's are ~1 GB)


@dataclass
class LoadResult:
    """How ``import MODULE`` ended in a child process, and what the loader and the binaries say."""

    module: str
    status: str  # ok | exception | signal | timeout | exit
    seconds: float = 0.0
    returncode: int | None = None
    signal: str = ""  # SIGSEGV, SIGABRT, ...
    error_type: str = ""
    error_message: str = ""
    library: str = ""  # the library the loader could not load or resolve (a soname or a path)
    symbol: str = ""  # an undefined symbol, or a missing symbol version (GLIBCXX_3.4.32)
    required_by: str = ""  # the binary that needed `library` / `symbol`
    extension: str = ""  # the extension module being initialised when the child died
    last_init: str = ""  # the last library whose initialiser the loader ran (LD_DEBUG=files)
    traceback: list[str] = field(default_factory=list)
    searched: dict[str, list[str]] = field(default_factory=dict)  # library -> 'dirs (source)' it searched
    resolved: dict[str, str] = field(default_factory=dict)  # library -> the file the loader took for it
    loaded: list[str] = field(default_factory=list)  # libraries the loader initialised, in order
    abi: dict[str, Any] = field(default_factory=dict)
    duplicates: dict[str, list[str]] = field(default_factory=dict)  # runtime libraries loaded from two files
    autoload: bool = False  # the plugin has a torch.backends entry point: `import torch` imports it
    env: dict[str, str] = field(default_factory=dict)  # LD_LIBRARY_PATH / PYTHONPATH the child ran with

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    def json(self) -> dict[str, Any]:
        return asdict(self)

    def caution(self) -> str:
        """Runtime libraries the import loaded from two files (two libgomp, two libstdc++): it may work, and
        crash or compute wrong later ('' when none)."""
        if not self.duplicates:
            return ""
        copies = "; ".join(f"{family}: {', '.join(paths)}" for family, paths in self.duplicates.items())
        return (f"importing '{self.module}' loaded two copies of one runtime library ({copies}): two OpenMP or "
                f"C++ runtimes in one process can deadlock, crash or slow down. Fix: keep one, by removing the "
                f"LD_LIBRARY_PATH / LD_PRELOAD entry that brings in the other (`torchfl doctor --bisect-env` lists "
                f"the entries), or by installing packages that share it")

    def summary(self) -> str:
        """One line: how the import ended."""
        if self.ok:
            return f"import {self.module}: ok in a child process ({self.seconds:.1f} s)"
        if self.status == "signal":
            return f"import {self.module}: the child process was killed by {self.signal}"
        if self.status == "timeout":
            return f"import {self.module}: still running after {self.seconds:.0f} s (stopped)"
        if self.status == "exit":
            return f"import {self.module}: the child process exited with status {self.returncode}"
        return f"import {self.module}: {self.error_type}: {_first_line(self.error_message)}"

    def problem(self) -> str:
        """What happened, why, and the fix ('' when the import worked)."""
        if self.ok:
            return ""
        what = f"importing the plugin '{self.module}' " + {
            "signal": f"crashed the process with {self.signal}",
            "timeout": f"did not finish in {self.seconds:.0f} s",
            "exit": f"ended the process with exit status {self.returncode}",
        }.get(self.status, f"failed: {self.error_type}: {_first_line(self.error_message)}")
        where = [self.error_message] if self.status in ("signal", "exit") and self.error_message else []
        if self.extension:
            where.append(f"while initialising the extension {self.extension}")
        if self.status in ("signal", "exit") and self.last_init and self.last_init != self.extension:
            where.append(f"the last library the loader initialised was {self.last_init}")
        frames = [line.strip() for line in self.traceback if line.strip().startswith("File ")]
        if self.status == "timeout" and frames:
            where.append(f"it was at: {frames[0]}")
        text = what + (f" ({'; '.join(where)})" if where else "") + ". " + self._why_and_fix()
        if self.autoload:
            text += (f" Note: {self.module} registers itself in the torch.backends entry point group, so every "
                     f"`import torch` in this environment imports it and fails the same way; "
                     f"TORCH_DEVICE_BACKEND_AUTOLOAD=0 turns that off meanwhile (also for `torchfl`: "
                     f"TORCH_DEVICE_BACKEND_AUTOLOAD=0 torchfl doctor).")
        facts = abi_text(self.abi)
        return text + (f" ABI: {facts}." if facts else "")

    def _why_and_fix(self) -> str:
        abi = self.abi
        mismatch = abi_mismatches(abi)
        env = self.env.get("LD_LIBRARY_PATH", "")
        if self.library and "cannot open shared object file" in self.error_message:
            tried = self.searched.get(os.path.basename(self.library), [])
            looked = (f" (the loader searched {'; '.join(tried)} and the system's folders)" if tried
                      else " (the loader searched the system's folders only)")
            return (f"Why: the loader could not find {self.library}, which {self.required_by or 'the plugin'} "
                    f"needs{looked}; LD_LIBRARY_PATH is {env or 'unset'}. Fix: install the runtime that "
                    f"provides {self.library} (for a vendor plugin: its toolkit, then source its set_env.sh), "
                    f"or add the folder holding it to LD_LIBRARY_PATH "
                    f"(export LD_LIBRARY_PATH=/path/to/lib:$LD_LIBRARY_PATH).")
        if self.symbol and self.status == "exception" and "not found (required by" in self.error_message:
            return (f"Why: {self.required_by} needs the symbol version {self.symbol}, which {self.library} "
                    f"does not provide (it is older than the one the plugin was built with). Fix: "
                    f"{_version_fix(self.symbol, self.library)}")
        if self.symbol:
            return (f"Why: {self.required_by or 'a binary of the plugin'} needs the symbol {self.symbol}, which "
                    f"no library loaded with it defines{self._taken_from()}. {_symbol_why(self.symbol)} Fix: "
                    f"{_symbol_fix(self.symbol, self.module, abi)}")
        if mismatch:
            return "Why: " + "; ".join(mismatch) + ". Fix: " + _abi_fix(abi, self.module)
        if self.status == "signal":
            return (f"Why: native code of the plugin or of a library it loads failed; Python cannot catch a "
                    f"{self.signal}. Usual causes: the plugin built for another torch, driver or runtime "
                    f"release, or two copies of one library in the process. Fix: install the plugin build "
                    f"that matches torch {abi.get('host', {}).get('torch', '')} and the installed runtime, "
                    f"and run `torchfl doctor --bisect-env` to find an LD_LIBRARY_PATH or PYTHONPATH entry "
                    f"that brings in a wrong library.")
        if self.status == "timeout":
            return ("Why: something in the import waits (a device that does not answer, a lock, a network "
                    "licence check). Fix: check the driver (the vendor's device-management tool should list "
                    "the devices), or raise the time limit with --plugin-timeout if the import is only slow.")
        if self.error_type == "ModuleNotFoundError" and self.error_message.endswith(f"'{self.module}'"):
            return (f"Why: no '{self.module}' package is on sys.path of {abi.get('host', {}).get('python', '')}. "
                    f"Fix: install it into this environment, or check PYTHONPATH.")
        if self.error_message.startswith("could not start"):
            return "Fix: point doctor at a Python that runs (this one: sys.executable)."
        torch_version = abi.get("host", {}).get("torch", "")
        return ("Fix: read the message above; `torchfl doctor --bisect-env` finds an LD_LIBRARY_PATH or PYTHONPATH "
                "entry that breaks the import, and the plugin build must match the installed torch"
                + (f" ({torch_version})." if torch_version else "."))


    def _taken_from(self) -> str:
        # the libraries the loader took from LD_LIBRARY_PATH or RUNPATH folders: the usual suspects
        chosen = [f"{lib} from {path}" for lib, path in self.resolved.items()
                  if not path.startswith(("/lib/", "/lib64/", "/usr/lib/", "/usr/lib64/"))
                  and not path.startswith(sys.base_prefix)]
        return f" (the loader took {', '.join(chosen[:4])})" if chosen else ""


def _first_line(text: str) -> str:
    return (text.strip().splitlines() or [""])[0]


def _symbol_why(symbol: str) -> str:
    if symbol.startswith(("_ZN3c10", "_ZN2at", "_ZN5torch", "_ZNK3c10", "_ZNK2at")):
        return ("It is a PyTorch C++ symbol: the plugin was compiled against another torch release, and "
                "PyTorch's C++ ABI changes between minor releases.")
    return ("A library the plugin links was replaced by another build of it (an LD_LIBRARY_PATH entry that "
            "shadows the right one), or is older than the one the plugin was built with.")


def _symbol_fix(symbol: str, module: str, abi: dict[str, Any]) -> str:
    if _symbol_why(symbol).startswith("It is a PyTorch"):
        torch_version = abi.get("host", {}).get("torch", "")
        return (f"install the {module} build made for torch {torch_version} (`torchfl doctor` prints the "
                f"release table's pip command), or the torch the installed {module} was built for.")
    return ("run `torchfl doctor --bisect-env` to find the LD_LIBRARY_PATH entry that brings in the wrong "
            "library, and remove it.")


def _version_fix(symbol: str, library: str) -> str:
    if symbol.startswith(("GLIBCXX_", "CXXABI_")):
        return (f"use a newer libstdc++ than {library}: upgrade the system's (apt/yum install of GCC's runtime), "
                f"or in a conda environment `conda install -c conda-forge 'libstdcxx-ng>=12'`; an "
                f"LD_LIBRARY_PATH entry holding an old libstdc++.so.6 can also cause this (`torchfl doctor "
                f"--bisect-env`).")
    if symbol.startswith("GLIBC_"):
        return (f"the plugin needs glibc {symbol[6:]} or newer: use an OS image with that glibc, or a plugin "
                f"wheel built for an older manylinux tag.")
    return "install the library version the plugin was built against."


# The child ----------------------------------------------------------------------------------------
def load(module: str, *, env: dict[str, str] | None = None, timeout: float = DEFAULT_TIMEOUT,
         python: str | None = None, abi: bool | None = None) -> LoadResult:
    """``import module`` in a child process of `python` (default: this one) with `env` (default: this
    process's environment); never raises for anything the import does.

    Args:
        module: the module to import (a plugin's top-level name, ``torch_npu``).
        env: the child's environment (LD_LIBRARY_PATH, PYTHONPATH, ... are taken from it as they are).
        timeout: seconds the import may take; then the child prints its Python stack and is stopped.
        abi: also compare the plugin's binaries with the host (`abi_facts`, which reads every binary of
            the plugin: about a second for torch_npu); None (the default): only when the import failed.

    Example::

        >>> result = load("json")
        >>> result.ok, result.status
        (True, 'ok')
    """
    env = dict(os.environ if env is None else env)
    with tempfile.TemporaryDirectory(prefix="torch_fl_load_") as tmp:
        out, debug = os.path.join(tmp, "report.json"), os.path.join(tmp, "ld")
        env.update(LD_DEBUG="libs,files", LD_DEBUG_OUTPUT=debug, PYTHONFAULTHANDLER="1")
        start = time.perf_counter()
        try:
            proc = subprocess.Popen([python or sys.executable, "-c", _CHILD, module, out, str(timeout)],
                                    env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                    stderr=subprocess.PIPE, start_new_session=True)
        except OSError as exc:  # no such interpreter, no more processes: say so, as a result
            return LoadResult(module=module, status="exception", error_type=type(exc).__name__,
                              error_message=f"could not start {python or sys.executable}: {exc}")
        try:
            _, err = proc.communicate(timeout=timeout + _GRACE)
            killed = False
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)  # its own session: the child and whatever it started
            _, err = proc.communicate()
            killed = True
        seconds = time.perf_counter() - start
        stderr = err.decode(errors="replace")
        report = _read_json(out)
        loader = _loader_log(debug)
    result = LoadResult(module=module, status="ok", seconds=round(seconds, 2), returncode=proc.returncode,
                        env={k: env.get(k, "") for k in ("LD_LIBRARY_PATH", "PYTHONPATH", "LD_PRELOAD")})
    result.searched, result.resolved, result.loaded = loader["searched"], loader["resolved"], loader["loaded"]
    result.last_init = loader["loaded"][-1] if loader["loaded"] else ""
    _classify(result, report, stderr, killed)
    result.duplicates = duplicate_runtimes(result.loaded)
    result.autoload = autoloads(module, env)
    if abi or (abi is None and not result.ok):
        result.abi = abi_facts(module, env=env, loaded=result.loaded)
    return result


def _read_json(path: str) -> dict[str, Any] | None:
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def _classify(result: LoadResult, report: dict[str, Any] | None, stderr: str, killed: bool) -> None:
    code = result.returncode
    loading = _LOADING.findall(stderr)
    if loading and loading[-1][0] == "loading":
        result.extension = loading[-1][1].strip()
    if report is not None and report.get("ok") and code == 0:
        return
    if report is not None and not report.get("ok"):
        result.status = "exception"
        result.error_type, result.error_message = report["type"], report["message"]
        result.traceback = [line.rstrip() for line in report.get("traceback", [])]
        _loader_message(result, report)
        return
    if killed or "Timeout (" in stderr:
        result.status = "timeout"
        result.traceback = _faulthandler_stack(stderr)
        result.extension = ""
        return
    if report is not None and report.get("ok"):
        result.extension = ""
        result.error_message = ("the import itself finished; the process died afterwards, at interpreter exit "
                                "(an atexit handler or a library's destructor)")
    if code is not None and code < 0:
        result.status = "signal"
        result.signal = _signal_name(-code)
    else:
        result.status = "exit"
    result.traceback = _faulthandler_stack(stderr) or stderr.strip().splitlines()[-8:]


def _loader_message(result: LoadResult, report: dict[str, Any]) -> None:
    message = result.error_message
    missing = _MISSING_SO.search(message)
    if missing:
        result.library = missing.group(1)
        result.required_by = report.get("path", "") or result.extension
        return
    needed = _VERSION_NEEDED.search(message)
    if needed:
        result.symbol, result.required_by = needed.group(1), needed.group(2)
        result.library = message.split(":", 1)[0].strip()
        return
    undefined = _UNDEFINED.search(message)
    if undefined:
        result.symbol = undefined.group(1)
        result.required_by = message.split(":", 1)[0].strip() or report.get("path", "")
        result.library = result.required_by


def _folders(path: str) -> str:
    """A loader search path without the subfolders it tries in each entry (glibc-hwcaps/x86-64-v3, tls, ...)."""
    entries = list(dict.fromkeys(os.path.normpath(p) for p in path.split(":") if p))
    kept = [e for e in entries if not any(e != other and e.startswith(other + os.sep) for other in entries)]
    return ":".join(kept)


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def _faulthandler_stack(stderr: str) -> list[str]:
    """The Python frames faulthandler printed (most recent call first), without the markers."""
    lines = [line.rstrip() for line in stderr.splitlines()]
    start = next((i for i, line in enumerate(lines) if line.startswith(("Fatal Python error", "Timeout ("))),
                 None)
    if start is None:
        return []
    return [line for line in lines[start:start + 30] if line and not line.startswith("[torch-fl]")]


def _loader_log(prefix: str) -> dict[str, Any]:
    """What LD_DEBUG=libs,files wrote: per library, where the loader looked (search path and its source) and
    which file it took; and the libraries whose initialisers ran, in order."""
    searched: dict[str, list[str]] = {}
    resolved: dict[str, str] = {}
    loaded: list[str] = []
    current = tried = ""
    for path in sorted(glob.glob(prefix + ".*")):
        try:
            text = Path(path).read_text(errors="replace")
        except OSError:
            continue
        for line in text.splitlines():
            body = line.split(":", 1)[1].strip() if ":" in line else ""
            if body.startswith("find library="):
                current, tried = body[len("find library="):].split(" ", 1)[0], ""
                searched.setdefault(current, [])
            elif body.startswith("search path=") and current:
                where, _, source = body[len("search path="):].partition("(")
                entry = f"{_folders(where.strip())} ({source.rstrip(')')})"
                if "system search path" not in source and entry not in searched[current]:
                    searched[current].append(entry)  # the system's list is the same long one for every library
            elif body.startswith("trying file="):
                tried = body[len("trying file="):]
            elif body.startswith("file=") and body.endswith("generating link map") and current and tried:
                if body[len("file="):].split(" ", 1)[0] == current:
                    resolved[current] = tried
                current = tried = ""
            elif body.startswith("calling init: "):
                loaded.append(body[len("calling init: "):])
    return {"searched": searched, "resolved": resolved, "loaded": loaded}


# ABI facts ----------------------------------------------------------------------------------------
def abi_facts(module: str, *, env: dict[str, str] | None = None, loaded: list[str] | None = None) -> dict[str, Any]:
    """The host's Python ABI tag, glibc and libstdc++, and what the plugin's binaries are built for.

    Read without importing the plugin: the extension modules' file names (``_C.cpython-310-x86_64-linux-
    gnu.so``: Python 3.10), its wheel's tags, and the ``GLIBC_``/``GLIBCXX_``/``CXXABI_`` symbol versions
    its binaries need, against those this system's glibc and libstdc++ define.
    """
    host = host_facts(loaded)
    plugin = plugin_facts(module, env)
    return {"host": host, "plugin": plugin}


def host_facts(loaded: list[str] | None = None) -> dict[str, Any]:
    libstdcxx = next((p for p in loaded or () if os.path.basename(p).startswith("libstdc++.so")), "") \
        or _find_libstdcxx()
    provided = _symbol_versions(libstdcxx) if libstdcxx else {}
    try:
        import torch

        torch_version = torch.__version__
    except Exception:  # doctor runs with torch; this module alone does not need it
        torch_version = ""
    return {
        "python": f"{sys.version_info.major}.{sys.version_info.minor}",
        "abi_tag": sys.implementation.cache_tag or "",
        "soabi": sysconfig.get_config_var("SOABI") or "",
        "glibc": (os.confstr("CS_GNU_LIBC_VERSION") or "").replace("glibc ", "") if hasattr(os, "confstr") else "",
        "libstdcxx": libstdcxx,
        "glibcxx": _newest(provided.get("GLIBCXX", [])),
        "cxxabi": _newest(provided.get("CXXABI", [])),
        "torch": torch_version,
        "duplicates": duplicate_runtimes(loaded or []),
    }


def duplicate_runtimes(loaded: list[str]) -> dict[str, list[str]]:
    """Runtime libraries loaded from more than one file (two libstdc++, two libgomp): a recipe for crashes."""
    groups: dict[str, list[str]] = {}
    for path in loaded:
        base = os.path.basename(path)
        for family in ("libstdc++", "libgomp", "libiomp", "libgcc_s"):
            if base.startswith(family):
                real = os.path.realpath(path)
                if real not in groups.setdefault(family, []):
                    groups[family].append(real)
    return {family: paths for family, paths in groups.items() if len(paths) > 1}


def _find_libstdcxx() -> str:
    import ctypes.util

    name = ctypes.util.find_library("stdc++") or ""
    for folder in ("/usr/lib/x86_64-linux-gnu", "/usr/lib/aarch64-linux-gnu", "/usr/lib64", "/usr/lib"):
        candidate = os.path.join(folder, name or "libstdc++.so.6")
        if os.path.exists(candidate):
            return candidate
    return ""


def plugin_facts(module: str, env: dict[str, str] | None = None) -> dict[str, Any]:
    folder = _package_folder(module, env)
    facts: dict[str, Any] = {"folder": folder, "abi_tags": [], "wheel_tags": [], "glibc": "", "glibcxx": "",
                             "cxxabi": "", "binaries": 0}
    if not folder:
        return facts
    binaries = sorted(p for p in Path(folder).rglob("*.so*") if p.is_file())[:400]
    facts["binaries"] = len(binaries)
    facts["abi_tags"] = sorted({tag for p in binaries if (tag := extension_tag(p.name))})
    needed: dict[str, list[str]] = {}
    budget = _SCAN_LIMIT
    for path in binaries:
        size = path.stat().st_size
        if size > budget:
            break
        budget -= size
        for key, versions in _symbol_versions(str(path)).items():
            needed.setdefault(key, []).extend(versions)
    facts.update(glibc=_newest(needed.get("GLIBC", [])), glibcxx=_newest(needed.get("GLIBCXX", [])),
                 cxxabi=_newest(needed.get("CXXABI", [])), wheel_tags=_wheel_tags(module, folder))
    return facts


def extension_tag(filename: str) -> str:
    """The Python ABI an extension module's file name is built for: 'cpython-310', 'abi3', or ''."""
    match = _SO_TAG.search(filename)
    if not match:
        return ""
    return match.group(1) if not match.group(1).startswith("cpython") else f"cpython-{match.group(2)}{match.group(3)}"


def _package_folder(module: str, env: dict[str, str] | None) -> str:
    """The plugin's folder, found on the child's sys.path (its PYTHONPATH) without importing it."""
    top = module.split(".")[0]
    extra = [p for p in (env or {}).get("PYTHONPATH", "").split(os.pathsep) if p]
    for folder in extra:
        candidate = Path(folder) / top
        if candidate.is_dir():
            return str(candidate)
    try:
        spec = importlib.util.find_spec(top)
    except (ImportError, ValueError):
        return ""
    if spec is None or not spec.submodule_search_locations:
        return os.path.dirname(spec.origin) if spec is not None and spec.origin else ""
    return str(next(iter(spec.submodule_search_locations)))


def autoloads(module: str, env: dict[str, str] | None = None) -> bool:
    """Whether `module`'s distribution registers a ``torch.backends`` entry point (torch_npu does): then
    ``import torch`` imports it (unless TORCH_DEVICE_BACKEND_AUTOLOAD=0)."""
    top = module.split(".")[0]
    folder = _package_folder(module, env)
    files = sorted(Path(folder).parent.glob(f"{top}-*.dist-info/entry_points.txt")) if folder else []
    for path in files:
        text = path.read_text(errors="replace")
        section = re.search(r"^\[torch\.backends\]\s*$(.*?)(^\[|\Z)", text, re.M | re.S)
        return bool(section and section.group(1).strip())
    return False


def _wheel_tags(module: str, folder: str) -> list[str]:
    """The Tag: lines of the plugin's WHEEL file: beside its folder (the child's sys.path), else this process's."""
    from importlib import metadata

    top = module.split(".")[0]
    for wheel in sorted(Path(folder).parent.glob(f"{top}-*.dist-info/WHEEL")):
        text = wheel.read_text(errors="replace")
        return [line.split(":", 1)[1].strip() for line in text.splitlines() if line.startswith("Tag:")]
    for dist in (top.replace("_", "-"), top):
        try:
            text = metadata.distribution(dist).read_text("WHEEL") or ""
        except metadata.PackageNotFoundError:
            continue
        return [line.split(":", 1)[1].strip() for line in text.splitlines() if line.startswith("Tag:")]
    return []


def _symbol_versions(path: str) -> dict[str, list[str]]:
    """The GLIBC_/GLIBCXX_/CXXABI_ version names in a binary's strings (needed or defined ones)."""
    try:
        with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as data:
            return {key: sorted({m.decode() for m in pattern.findall(data)}, key=_version_key)
                    for key, pattern in _SYMVER.items()}
    except (OSError, ValueError):
        return {}


def _version_key(text: str) -> tuple[int, ...]:
    return tuple(int(p) for p in text.split(".") if p.isdigit())


def _newest(versions: list[str]) -> str:
    return max(versions, key=_version_key) if versions else ""


def abi_mismatches(abi: dict[str, Any]) -> list[str]:
    """Where the plugin's binaries need more than the host has (Python ABI, glibc, libstdc++)."""
    host, plugin = abi.get("host", {}), abi.get("plugin", {})
    found = []
    tags = [t for t in plugin.get("abi_tags", []) if t.startswith("cpython-")]
    if tags and host.get("abi_tag") and host["abi_tag"] not in tags:
        found.append(f"the plugin's extension modules are built for {', '.join(_python(t) for t in tags)}, "
                     f"and this interpreter is Python {host['python']} ({host['abi_tag']}), which does not "
                     f"load them")
    for key, label in (("glibc", "glibc"), ("glibcxx", "libstdc++ (GLIBCXX)"), ("cxxabi", "libstdc++ (CXXABI)")):
        need, have = plugin.get(key, ""), host.get(key, "")
        if need and have and _version_key(need) > _version_key(have):
            found.append(f"the plugin needs {label} {need}, and this system's is {have}"
                         + (f" ({host['libstdcxx']})" if key != "glibc" and host.get("libstdcxx") else ""))
    for family, paths in host.get("duplicates", {}).items():
        found.append(f"two copies of {family} were loaded ({', '.join(paths)})")
    return found


def _python(tag: str) -> str:
    digits = tag.split("-", 1)[1]
    return f"Python {digits[0]}.{digits[1:]}"


def _abi_fix(abi: dict[str, Any], module: str) -> str:
    host, plugin = abi.get("host", {}), abi.get("plugin", {})
    tags = [t for t in plugin.get("abi_tags", []) if t.startswith("cpython-")]
    if tags and host.get("abi_tag") not in tags:
        return (f"reinstall the plugin for this Python: `{sys.executable} -m pip install --force-reinstall "
                f"--no-deps {module.replace('_', '-')}=={_installed(module) or 'VERSION'}` picks the "
                f"{host['abi_tag'].replace('cpython-', 'cp')} wheel (if the release has none, use the Python "
                f"its wheels are built for).")
    if host.get("duplicates"):
        return ("remove the LD_LIBRARY_PATH / LD_PRELOAD entry that brings in the second copy "
                "(`torchfl doctor --bisect-env` finds it).")
    if plugin.get("glibcxx") and host.get("glibcxx") and \
            _version_key(plugin["glibcxx"]) > _version_key(host["glibcxx"]):
        return _version_fix("GLIBCXX_" + plugin["glibcxx"], host.get("libstdcxx") or "libstdc++.so.6")
    return _version_fix("GLIBC_" + plugin.get("glibc", ""), "libc.so.6")


def _installed(module: str) -> str:
    from ..description.probe import installed_version

    return installed_version(module)


def abi_text(abi: dict[str, Any]) -> str:
    """The ABI facts in one line: plugin vs host."""
    if not abi:
        return ""
    host, plugin = abi.get("host", {}), abi.get("plugin", {})
    parts = [f"Python ABI host {host.get('abi_tag') or '?'}, plugin {', '.join(plugin.get('abi_tags') or []) or '?'}"]
    if plugin.get("wheel_tags"):
        parts[-1] += f" (wheel {plugin['wheel_tags'][0]})"
    parts.append(f"glibc host {host.get('glibc') or '?'}, plugin needs {plugin.get('glibc') or 'nothing versioned'}")
    parts.append(f"libstdc++ host {host.get('glibcxx') or '?'} ({host.get('libstdcxx') or 'not found'}), "
                 f"plugin needs {plugin.get('glibcxx') or 'none'}")
    return "; ".join(parts)
