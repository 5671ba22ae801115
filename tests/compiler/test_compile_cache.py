"""The cache: entries per fingerprint, stale-entry removal, concurrent writers, killed writers."""

from __future__ import annotations

import json
import logging
import os
import signal
import time

import pytest
import torch

from torch_fl.cli import main
from torch_fl.compiler import cache
from torch_fl.description import registry
from torch_fl.errors import ConfigError


def _entry_with_torch(version: str, monkeypatch) -> cache.Entry:
    """Open the entry of a stack whose torch version is `version`, then let go of it (a process that
    has exited)."""
    monkeypatch.setattr(torch, "__version__", version)
    entry = cache.open_entry(registry.get("cpu"))
    cache.release()
    return entry


def _age(entry: cache.Entry, seconds_ago: float) -> None:
    when = time.time() - seconds_ago
    os.utime(entry.path / cache.MANIFEST, (when, when))


def test_an_entry_is_a_directory_per_fingerprint_with_a_manifest(compile_cache):
    entry = cache.open_entry(registry.get("cpu"))
    assert entry.created and entry.root == compile_cache
    assert entry.path == compile_cache / entry.fingerprint.entry_name
    manifest = json.loads((entry.path / "manifest.json").read_text())
    assert manifest["components"] == entry.fingerprint.components
    assert manifest["fingerprint"] == entry.fingerprint.digest and manifest["description"] == "cpu"
    assert entry.inductor_dir.is_dir() and entry.triton_dir.is_dir()
    again = cache.open_entry(registry.get("cpu"))
    assert again.path == entry.path and not again.created
    assert [s.status for s in cache.scan(compile_cache)] == ["ok"]


def test_root_is_fl_cache_dir_else_the_description(monkeypatch, tmp_path):
    desc = registry.get("cpu")
    assert cache.cache_root(desc) == tmp_path / "cache"
    monkeypatch.delenv("FL_CACHE_DIR")
    assert cache.cache_root(desc) == desc.cache_dir()
    assert str(cache.cache_root(desc)).endswith(os.path.join(".cache", "torch_fl", "cpu"))


def test_a_stale_entry_is_removed_and_the_newest_kept(monkeypatch, compile_cache, caplog):
    monkeypatch.setenv("FL_CACHE_KEEP", "2")
    oldest = _entry_with_torch("2.10.0", monkeypatch)
    _age(oldest, 300)
    middle = _entry_with_torch("2.11.0", monkeypatch)
    _age(middle, 200)
    # An entry of another description is not a stale version of this one.
    other = cache.open_entry(registry.get("minimal"))
    cache.release()
    _age(other, 1000)
    with caplog.at_level(logging.WARNING, logger="torch_fl.compile"):
        newest = _entry_with_torch("2.12.0", monkeypatch)
    names = sorted(p.name for p in compile_cache.iterdir() if not p.name.startswith("."))
    assert names == sorted([middle.path.name, newest.path.name, other.path.name])
    assert newest.removed == [oldest.path.name]
    assert newest.replaced == {"torch": ("2.11.0", "2.12.0")}
    message = caplog.records[-1].getMessage()
    assert "torch 2.11.0 -> 2.12.0" in message and f"removed stale {oldest.path.name}" in message


@pytest.mark.slow
def test_an_entry_in_use_by_a_running_process_is_kept(monkeypatch, compile_cache, spawn):
    monkeypatch.setenv("FL_CACHE_KEEP", "1")
    user = spawn(code="import sys, time\nfrom torch_fl.compiler import cache\nfrom torch_fl.description "
                      "import registry\nprint(cache.open_entry(registry.get('cpu')).path, flush=True)\n"
                      "time.sleep(120)")
    in_use = user.stdout.readline().strip()
    assert in_use, user.stderr.read()
    newer = _entry_with_torch("2.99.0", monkeypatch)
    assert newer.removed == [] and os.path.isdir(in_use)
    user.kill()
    user.wait()
    newest = _entry_with_torch("2.99.1", monkeypatch)
    assert not os.path.exists(in_use) and not newer.path.exists()
    assert sorted(newest.removed) == sorted([os.path.basename(in_use), newer.path.name])


def test_keep_count_must_be_a_positive_number(monkeypatch):
    monkeypatch.setenv("FL_CACHE_KEEP", "0")
    with pytest.raises(ConfigError, match="FL_CACHE_KEEP"):
        cache.open_entry(registry.get("cpu"))


def test_a_corrupt_entry_is_reported_and_then_replaced(compile_cache, capsys, caplog):
    entry = cache.open_entry(registry.get("cpu"))
    cache.release()
    manifest = json.loads((entry.path / "manifest.json").read_text())
    manifest["components"]["torch"] = "tampered"
    (entry.path / "manifest.json").write_text(json.dumps(manifest))
    assert main(["cache", "verify"]) == 1
    out = capsys.readouterr().out
    assert f"CORRUPT   {entry.path.name}" in out and "hash of its components" in out
    with caplog.at_level(logging.WARNING, logger="torch_fl.compile"):
        again = cache.open_entry(registry.get("cpu"))
    assert again.created and "is corrupt" in caplog.text
    assert main(["cache", "verify"]) == 0


@pytest.mark.slow
def test_two_processes_warming_the_same_cache_both_succeed(use_description, tiny_model, compile_cache, spawn):
    use_description('jit = true\naot = true\nbackend = "aot_eager"\ndynamic_shapes = "static"')
    ranks = [spawn("warmup", tiny_model, "--shapes", "2x4", "3x4") for _ in range(2)]
    outputs = [rank.communicate(timeout=300) for rank in ranks]
    for rank, (out, err) in zip(ranks, outputs, strict=True):
        assert rank.returncode == 0, err
        assert "n/a (backend aot_eager keeps no compiled code)" in out
    statuses = cache.scan(compile_cache)
    assert [s.status for s in statuses] == ["ok"] and statuses[0].problem == ""
    records = statuses[0].manifest["warmup"]
    assert sorted(r["pid"] for r in records) == sorted([ranks[0].pid] * 2 + [ranks[1].pid] * 2)


KILLED_WRITER = """
import os, sys, time
from torch_fl.compiler import cache
from torch_fl.description import registry

stage = sys.argv[1]
real = os.rename if stage == "create" else os.replace

def paused(src, dst):
    print("PAUSED", flush=True)  # the new manifest is written, not yet renamed into place
    time.sleep(120)
    real(src, dst)

if stage == "create":
    os.rename = paused
    cache.open_entry(registry.get("cpu"))
else:
    entry = cache.open_entry(registry.get("cpu"))
    os.replace = paused
    cache.record_warmup(entry, [{"model": "killed"}])
"""


@pytest.mark.slow
@pytest.mark.parametrize("stage", ["create", "update"])
def test_a_writer_killed_mid_write_leaves_a_valid_cache(stage, compile_cache, spawn, capsys):
    writer = spawn(stage, code=KILLED_WRITER)
    assert writer.stdout.readline().strip() == "PAUSED", writer.stderr.read()
    os.kill(writer.pid, signal.SIGKILL)
    writer.wait()
    leftovers = [p.name for p in compile_cache.rglob("*.tmp-*")] + [
        p.name for p in compile_cache.iterdir() if p.name.startswith(".tmp-")]
    assert leftovers, "the writer was killed between writing and renaming"
    assert main(["cache", "verify"]) == 0
    out = capsys.readouterr().out
    assert "0 corrupt" in out and "CORRUPT" not in out
    # The next writer takes the lock the dead one held, and sweeps its debris.
    entry = cache.open_entry(registry.get("cpu"))
    cache.record_warmup(entry, [{"model": "next"}])
    assert [r["model"] for r in entry.manifest()["warmup"]] == ["next"]
    assert not list(compile_cache.rglob("*.tmp-*"))
    assert [s.status for s in cache.scan(compile_cache)] == ["ok"]


def test_the_cpu_isa_probe_is_answered_from_the_entry(monkeypatch, compile_cache):
    from torch._inductor.cpu_vec_isa import VecISA

    from torch_fl.compiler import isa

    probes = []
    monkeypatch.setattr(isa, "_original", lambda self, path: probes.append(path) or True)
    monkeypatch.setattr(VecISA, "_probe_load", isa._memoized)  # restored after the test
    entry = cache.open_entry(registry.get("cpu"))
    isa.install(entry.path)
    assert VecISA._probe_load(None, "/inductor/c1abc.so") is True
    assert VecISA._probe_load(None, "/inductor/c1abc.so") is True  # a later process: no subprocess
    assert probes == ["/inductor/c1abc.so"]
    memo = json.loads((entry.path / isa.MEMO).read_text())
    assert memo == {isa.cpu_signature(): {"c1abc.so": True}}
    isa.cpu_signature.cache_clear()
    monkeypatch.setattr(isa.platform, "machine", lambda: "another-cpu")
    try:
        VecISA._probe_load(None, "/inductor/c1abc.so")  # another CPU sharing the cache asks again
    finally:
        isa.cpu_signature.cache_clear()
    assert len(probes) == 2


def test_torch_key_is_answered_from_the_entry(monkeypatch, compile_cache, tmp_path):
    from torch._inductor import codecache

    from torch_fl.compiler import torchkey

    calls = []

    class Key:
        """A stand-in for torch's prefetchable torch_key: counts computations, accepts set()."""

        value: bytes | None = None

        def __call__(self):
            calls.append(1)
            return b"\x01" * 32

        def set(self, value):
            self.value = value

    monkeypatch.setattr(codecache, "torch_key", Key())
    entry = cache.open_entry(registry.get("cpu"))
    torchkey.install(entry.path)  # the first process computes it and records it
    assert len(calls) == 1 and json.loads((entry.path / torchkey.MEMO).read_text())
    later = Key()
    monkeypatch.setattr(codecache, "torch_key", later)
    torchkey.install(entry.path)  # a later process: no hashing of torch's sources
    assert len(calls) == 1 and later.value == b"\x01" * 32
    # An edited torch (another signature of its files) computes the key again.
    monkeypatch.setattr(torchkey, "_signature", lambda root: "edited")
    torchkey.install(entry.path)
    assert len(calls) == 2
    assert torchkey.MEMO not in cache.read_manifest(entry.path)["artifacts"]
