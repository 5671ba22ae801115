"""A memo of Inductor's ``torch_key``, kept in the cache entry.

Every process that compiles or loads Inductor code first computes ``torch._inductor.codecache.torch_key()``,
the sha256 of every Python file of the installed torch package (it goes into every cache key, so that an
edited torch never loads code compiled for the old one): about 0.1 s idle and 0.3 s under load, a tenth of
a warm start. The memo maps a signature of those files (path, size and mtime of each: about 15 ms) to
the key, so a later process with the same files hands the key to torch with ``torch_key.set`` (the hook
torch's own compile workers use) instead of hashing. An edited torch source changes the signature, and
the key is computed again. On a torch without ``torch_key.set`` nothing changes.
"""

from __future__ import annotations

import functools
import hashlib
import json
import logging
import os
from pathlib import Path

from . import locks

_log = logging.getLogger("torch_fl.compile")

MEMO = "torch_key.json"
_SUFFIXES = (".py", ".so", ".pyd", ".cpp", ".ld")  # what torch_key reads (modules and two extra files)
_SKIP = frozenset({"__pycache__", "include", "share", "bin", "testing"})


@functools.cache
def _signature(root: str) -> str:
    h = hashlib.sha256()
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if d not in _SKIP)
        for name in sorted(filenames):
            if name.endswith(_SUFFIXES):
                try:
                    st = os.stat(os.path.join(dirpath, name))
                except OSError:
                    continue
                h.update(f"{os.path.relpath(dirpath, root)}/{name}:{st.st_size}:{st.st_mtime_ns}\n".encode())
    return h.hexdigest()


def install(entry_path: Path) -> None:
    """Set torch_key from `entry_path`/torch_key.json when the memo matches this torch's files;
    otherwise compute it (torch would anyway) and record it."""
    try:
        import torch
        from torch._inductor import codecache
    except ImportError:
        return
    key_fn = getattr(codecache, "torch_key", None)
    if not callable(getattr(key_fn, "set", None)):
        return
    signature = _signature(os.path.dirname(torch.__file__))
    path = entry_path / MEMO
    try:
        memo = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        memo = {}
    known = memo.get(signature) if isinstance(memo, dict) else None
    if isinstance(known, str):
        try:
            key_fn.set(bytes.fromhex(known))
            return
        except (RuntimeError, ValueError):  # already computed in this process, or a bad memo
            return
    value = key_fn()
    try:
        from .cache import LOCK, write_json_atomic

        with locks.exclusive(entry_path.parent / LOCK):
            write_json_atomic(path, {signature: value.hex()})  # one torch per entry: keep the latest
    except OSError as exc:
        _log.debug("compile: could not record torch_key in %s: %s", path, exc)
