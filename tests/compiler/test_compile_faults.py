"""A compile cache that cannot be used is a message, not a traceback: read-only, full, not a directory,
another owner. Each gives a torch-fl error naming the path and the fix, and torch.fl.compile goes on
without the cache (a private temporary directory, removed at exit) with that message as a warning.

The tests run as root, who may write anywhere: a read-only or full disk is simulated by making torch-fl's
own writes (trust.open_private, write_json_atomic) raise the OSError the kernel would."""

from __future__ import annotations

import errno
import logging
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import torch_fl
from torch_fl.cli import main
from torch_fl.compiler import cache, jit, locks, trust
from torch_fl.description import registry
from torch_fl.errors import CacheTrustError, CacheUnusableError

OTHER = 65534
needs_root = pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() != 0,
                                reason="chown to another user needs root")


def _raising(code: int):
    def fail(path, *args, **kwargs):
        raise OSError(code, os.strerror(code), str(path))
    return fail


@pytest.fixture(autouse=True)
def _fresh_fallback(monkeypatch):
    monkeypatch.setattr(jit, "_uncached", {})


def _compile_runs(caplog) -> str:
    """torch.fl.compile (eager backend: no Inductor, fast) runs and gives the right answer; returns the
    warnings it logged."""
    model = torch.nn.Linear(4, 2)
    x = torch.randn(3, 4)
    with caplog.at_level(logging.WARNING, logger="torch_fl.compile"):
        compiled = torch_fl.compile(model, device="cpu", backend="eager")
        assert torch.allclose(compiled(x), model(x))
    return caplog.text


def test_a_read_only_cache_dir(compile_cache, monkeypatch, caplog):
    compile_cache.mkdir(mode=0o700)
    monkeypatch.setattr(trust, "open_private", _raising(errno.EROFS))
    with pytest.raises(CacheUnusableError) as info:
        cache.open_entry(registry.get("cpu"))
    message = str(info.value)
    assert f"compile cache root {compile_cache} (from FL_CACHE_DIR) is unusable" in message
    assert "read-only file system" in message and f"{compile_cache}/.lock" in message
    assert f"Fix: make it writable (`chmod u+w {compile_cache}`" in message
    assert "point FL_CACHE_DIR at a writable directory" in message
    assert isinstance(info.value, OSError)  # still an OSError for callers that catch those
    monkeypatch.undo()
    monkeypatch.setenv("FL_CACHE_DIR", str(compile_cache))
    monkeypatch.setattr(jit, "_uncached", {})
    monkeypatch.setattr(trust, "open_private", _wrap_for(compile_cache, errno.EROFS))
    text = _compile_runs(caplog)
    assert "is unusable" in text and "Compiling without the cache for now" in text and "removed at exit" in text


def _wrap_for(root, code: int):
    """trust.open_private failing only under `root` (the temporary fallback root still works)."""
    real = trust.open_private

    def open_private(path, flags):
        if str(path).startswith(str(root)):
            raise OSError(code, os.strerror(code), str(path))
        return real(path, flags)
    return open_private


def test_a_full_disk(compile_cache, monkeypatch, caplog):
    real = cache.write_json_atomic

    def full(path, data):
        if str(path).startswith(str(compile_cache)):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(path))
        return real(path, data)
    monkeypatch.setattr(cache, "write_json_atomic", full)
    with pytest.raises(CacheUnusableError) as info:
        cache.open_entry(registry.get("cpu"))
    message = str(info.value)
    assert f"compile cache root {compile_cache} (from FL_CACHE_DIR) is unusable: the disk (or quota) " \
           "holding it is full" in message
    assert "No space left on device" in message and "torchfl cache clear --stale" in message
    assert "point FL_CACHE_DIR at a disk with room" in message
    assert not [p for p in compile_cache.iterdir() if not p.name.startswith(".")], "no half entry left"
    text = _compile_runs(caplog)
    assert "disk (or quota) holding it is full" in text and "Compiling without the cache" in text


def test_a_full_disk_while_recording_the_lock_holder_is_not_an_error():
    # The holder's pid in the lock file is informational: a full disk must not stop `cache clear`.
    locks._note_holder(-1)  # os.write fails (EBADF here, ENOSPC on a full disk): logged, not raised


@pytest.mark.parametrize("where", ["root", "parent"])
def test_a_cache_dir_that_is_a_file(where, tmp_path, monkeypatch, caplog, capsys):
    blocker = tmp_path / "taken"
    blocker.write_text("not a directory")
    root = blocker if where == "root" else blocker / "cache"
    monkeypatch.setenv("FL_CACHE_DIR", str(root))
    with pytest.raises(CacheUnusableError) as info:
        cache.open_entry(registry.get("cpu"))
    message = str(info.value)
    assert f"compile cache root {root} (from FL_CACHE_DIR) is unusable: {blocker} is a file, not a " \
           "directory" in message
    assert f"Fix: remove or rename {blocker}, or point FL_CACHE_DIR at a directory" in message
    text = _compile_runs(caplog)
    assert f"{blocker} is a file" in text and "Compiling without the cache" in text
    assert blocker.read_text() == "not a directory"


@needs_root
def test_a_cache_dir_of_another_owner_compiles_without_the_cache(compile_cache, caplog):
    compile_cache.mkdir(mode=0o700)
    os.chown(compile_cache, OTHER, OTHER)
    with pytest.raises(CacheTrustError, match="Fix: use a directory of your own"):
        cache.open_entry(registry.get("cpu"))
    text = _compile_runs(caplog)
    assert f"compile cache root {compile_cache} (from FL_CACHE_DIR) is refused" in text
    assert "Compiling without the cache for now" in text
    assert os.listdir(compile_cache) == [], "nothing is written into a refused root"


def test_the_fallback_directory_is_private_and_reused(compile_cache, tmp_path, monkeypatch, caplog):
    blocker = tmp_path / "taken"
    blocker.write_text("")
    monkeypatch.setenv("FL_CACHE_DIR", str(blocker))
    _compile_runs(caplog)
    first = os.environ["TORCHINDUCTOR_CACHE_DIR"]
    root = Path(first).parents[1]
    assert root.name.startswith("torch_fl-uncached-") and root.stat().st_mode & 0o077 == 0
    caplog.clear()
    _compile_runs(caplog)
    assert os.environ["TORCHINDUCTOR_CACHE_DIR"] == first and "Compiling without" not in caplog.text


def test_cache_commands_on_an_unusable_root_give_the_message(compile_cache, monkeypatch, capsys):
    cache.open_entry(registry.get("cpu"))
    cache.release()
    monkeypatch.setattr(trust, "open_private", _raising(errno.EROFS))
    assert main(["cache", "clear", "--all"]) == 1
    err = capsys.readouterr()
    text = err.out + err.err
    assert "is unusable" in text and "read-only file system" in text and "internal error" not in text


def test_a_home_of_a_user_that_does_not_exist():
    env = {**os.environ, "FL_CACHE_DIR": "~nosuchuser/x"}
    result = subprocess.run([sys.executable, "-m", "torch_fl", "cache", "info"], env=env,
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 2, result.stderr
    assert "internal error" not in result.stderr
    assert "FL_CACHE_DIR: '~nosuchuser/x' is not a path here: '~nosuchuser' names no user of this " \
           "machine; write the folder out in full" in result.stderr
