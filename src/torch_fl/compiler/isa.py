"""A memo of Inductor's CPU vector-ISA probe, kept in the cache entry.

Before Inductor compiles or loads CPU code in a process (a warm JIT start, an AOT package load), it
checks which SIMD instruction sets work (AVX2, AVX-512, AVX-512 BF16, AMX, ...) by building a tiny
library per ISA, cached on disk, and loading each one in a fresh Python subprocess, which is not cached:
about a second per process on a 2-core x86 machine, a third of a warm start. The answer depends only on
that library (its file name hashes the code, the flags, the compiler and torch), on the CPU and on the
OS, so it is remembered per entry (whose fingerprint covers torch and the compiler) and per CPU (the
hash of the flags the kernel reports), and a process that finds it skips the subprocesses.

The hook replaces ``VecISA._probe_load`` (torch 2.13 has it); on a torch without it nothing changes.
"""

from __future__ import annotations

import functools
import hashlib
import json
import logging
import platform
from pathlib import Path
from typing import Any

from . import locks

_log = logging.getLogger("torch_fl.compile")

MEMO = "isa_probe.json"
_memo_path: Path | None = None
_original: Any = None


def install(entry_path: Path) -> None:
    """Answer Inductor's ISA probes from (and record them in) `entry_path`/isa_probe.json."""
    global _memo_path, _original
    try:
        from torch._inductor.cpu_vec_isa import VecISA
    except ImportError:
        return
    if not callable(getattr(VecISA, "_probe_load", None)):
        return
    _memo_path = entry_path / MEMO
    if _original is None:
        _original = VecISA._probe_load
        VecISA._probe_load = _memoized


@functools.cache
def cpu_signature() -> str:
    """16 hex digits naming this CPU's model and instruction-set flags as the OS reports them."""
    text = f"{platform.machine()} {platform.processor()}"
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            lines = f.read().split("\n\n", 1)[0].splitlines()  # the first processor
        text += "".join(line for line in lines if line.split(":")[0].strip() in
                        ("model name", "flags", "Features", "CPU implementer", "CPU part"))
    except OSError:
        pass
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _read(path: Path) -> dict[str, dict[str, bool]]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _memoized(self: Any, output_path: str) -> bool:
    path = _memo_path
    if path is None:
        return _original(self, output_path)
    key, cpu = Path(output_path).name, cpu_signature()
    answers = _read(path).get(cpu)
    known = answers.get(key) if isinstance(answers, dict) else None
    if isinstance(known, bool):
        return known
    ok = _original(self, output_path)
    try:
        from .cache import LOCK, write_json_atomic

        with locks.exclusive(path.parent.parent / LOCK):
            memo = _read(path)
            if not isinstance(memo.get(cpu), dict):
                memo[cpu] = {}
            memo[cpu][key] = bool(ok)
            write_json_atomic(path, memo)
    except OSError as exc:  # the entry vanished: the answer is still right for this process
        _log.debug("compile: could not record the ISA probe in %s: %s", path, exc)
    return ok
