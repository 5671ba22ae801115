"""Trust: the cache root and entries must be this user's alone; what torch-fl creates is private
whatever the umask. The tests run as root, so they chown to uid 65534 to play another user."""

from __future__ import annotations

import contextlib
import logging
import os
import stat
import tempfile

import pytest

from torch_fl.cli import main
from torch_fl.compiler import cache, trust
from torch_fl.compiler.trust import CacheTrustError
from torch_fl.description import registry

OTHER = 65534  # 'nobody'
needs_root = pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() != 0,
                                reason="chown to another user needs root")


def _mode(path) -> int:
    return stat.S_IMODE(os.lstat(path).st_mode)


@contextlib.contextmanager
def _umask(mask: int):
    old = os.umask(mask)
    try:
        yield
    finally:
        os.umask(old)


def _fresh_process() -> None:
    """What a new process would see: no in-use locks held by this one."""
    cache.release()


def _entry() -> cache.Entry:
    entry = cache.open_entry(registry.get("cpu"))
    _fresh_process()
    return entry


@needs_root
def test_a_root_owned_by_another_user_is_refused(compile_cache, capsys):
    compile_cache.mkdir(mode=0o700)
    os.chown(compile_cache, OTHER, OTHER)
    with pytest.raises(CacheTrustError) as info:
        cache.open_entry(registry.get("cpu"))
    message = str(info.value)
    assert f"compile cache root {compile_cache} (from FL_CACHE_DIR) is refused" in message
    assert f"uid {OTHER}" in message and "mode 0700" in message and "Fix: use a directory of your own" in message
    assert os.listdir(compile_cache) == [], "nothing is written into a refused root"
    assert main(["cache", "verify"]) == 1
    assert "REFUSED" in capsys.readouterr().out


@pytest.mark.parametrize("mode", [0o777, 0o770, 0o702])
def test_a_root_writable_by_group_or_others_is_refused(compile_cache, mode):
    compile_cache.mkdir()
    os.chmod(compile_cache, mode)
    with pytest.raises(CacheTrustError, match=rf"writable by .*mode {mode:04o}.*Fix: `chmod go-w {compile_cache}`"):
        cache.open_entry(registry.get("cpu"))


def test_a_root_under_a_directory_others_can_write_is_refused(monkeypatch, tmp_path):
    shared = tmp_path / "shared"
    shared.mkdir()
    os.chmod(shared, 0o777)
    monkeypatch.setenv("FL_CACHE_DIR", str(shared / "fl-cache"))
    with pytest.raises(CacheTrustError, match=rf"the directory above it, {shared}, lets another user replace it"):
        cache.open_entry(registry.get("cpu"))
    os.chmod(shared, 0o1777)  # sticky, like /tmp: others cannot rename what is ours
    assert cache.open_entry(registry.get("cpu")).created


def test_everything_created_is_private_under_umask_000(compile_cache):
    with _umask(0):
        entry = cache.open_entry(registry.get("cpu"))
        # Inductor writes with the umask: 0666 files, 0777 directories...
        graph = entry.inductor_dir / "fxgraph" / "ab" / "fabc"
        graph.mkdir(parents=True)
        (graph / "entry").write_bytes(b"compiled")
        cache.seal(entry)
    # ... which the record makes private like everything torch-fl writes itself.
    for path in [compile_cache, entry.path, entry.inductor_dir, entry.triton_dir, graph.parent, graph]:
        assert _mode(path) == 0o700, path
    for path in [compile_cache / cache.LOCK, entry.path / cache.MANIFEST, entry.path / cache.INUSE,
                 graph / "entry"]:
        assert _mode(path) == 0o600, path


@needs_root
@pytest.mark.parametrize("planted", ["entry", "file", "dir"])
def test_an_entry_another_user_wrote_into_is_moved_aside_and_rebuilt(compile_cache, planted, caplog):
    entry = _entry()
    payload = entry.inductor_dir / "fxgraph" / "payload"
    payload.parent.mkdir()
    payload.write_bytes(b"crafted pickle")
    cache.seal(entry)
    target = {"entry": entry.path, "file": payload, "dir": payload.parent}[planted]
    os.chown(target, OTHER, OTHER)
    with caplog.at_level(logging.WARNING, logger="torch_fl.compile"):
        again = cache.open_entry(registry.get("cpu"))
    assert again.created and again.path == entry.path
    assert f"{target}: it belongs to nobody (uid {OTHER})" in again.quarantined[0]
    assert "is not used: another user could have written it" in caplog.text
    assert not (again.inductor_dir / "fxgraph").exists(), "the new entry starts empty"
    kept = [p for p in compile_cache.iterdir() if p.name.startswith(cache.QUARANTINE)]
    assert len(kept) == 1 and (kept[0] / "inductor" / "fxgraph" / "payload").read_bytes() == b"crafted pickle"


def test_an_entry_writable_by_others_or_holding_a_link_is_refused(compile_cache, tmp_path):
    entry = _entry()
    os.chmod(entry.path, 0o777)
    assert "writable by group and others" in cache.open_entry(registry.get("cpu")).quarantined[0]
    _fresh_process()
    outside = tmp_path / "outside.so"
    outside.write_bytes(b"code from elsewhere")
    (entry.inductor_dir / "kernel.so").symlink_to(outside)
    assert "is a symbolic link" in cache.open_entry(registry.get("cpu")).quarantined[0]


def test_a_planted_lock_link_is_never_followed(compile_cache, tmp_path):
    entry = _entry()
    victim = tmp_path / "victim"
    (entry.path / cache.INUSE).unlink()
    (entry.path / cache.INUSE).symlink_to(victim)
    again = cache.open_entry(registry.get("cpu"))
    assert again.created and "symbolic link" in again.quarantined[0]
    assert not victim.exists(), "opening the lock must not create the link's target"


def test_verify_names_untrusted_entries_and_clear_removes_quarantined_ones(compile_cache, capsys):
    entry = _entry()
    os.chmod(entry.path, 0o775)
    assert main(["cache", "verify"]) == 1
    out = capsys.readouterr().out
    assert f"UNTRUSTED {entry.path.name}: {entry.path}: it is writable by its group" in out
    cache.open_entry(registry.get("cpu"))  # moves it aside
    assert main(["cache", "verify"]) == 0
    assert "quarantine" in capsys.readouterr().out
    cache.release()
    assert main(["cache", "clear", "--corrupt"]) == 0
    assert not [p for p in compile_cache.iterdir() if p.name.startswith(cache.QUARANTINE)]


def test_problem_allows_root_owned_and_sticky_ancestors():
    st = os.stat("/")
    assert trust.problem(st, ancestor=True) == ""
    assert trust.problem(os.stat("/tmp"), ancestor=True) == ""  # 1777


def test_inductor_precompiled_headers_move_into_the_private_root(compile_cache, monkeypatch, capsys):
    import torch
    import torch._inductor.codecache as codecache

    import torch_fl  # noqa: F401  (torch.fl)

    # Restored after the test: other tests' entries must not inherit this one's header directory.
    monkeypatch.setattr(codecache, "_HEADER_DIR", codecache._HEADER_DIR)
    monkeypatch.setattr(codecache, "_HEADER_LOCK_DIR", codecache._HEADER_LOCK_DIR)
    assert codecache._HEADER_DIR.startswith(tempfile.gettempdir()), "Inductor's default: shared /tmp"
    torch.fl.compile(torch.nn.Linear(2, 2), backend="inductor")
    entry = cache.open_entry(registry.get("cpu"))
    headers = compile_cache / cache.HEADERS
    assert str(headers) == codecache._HEADER_DIR and str(headers / "locks") == codecache._HEADER_LOCK_DIR
    assert _mode(headers) == 0o700 and entry.root == compile_cache
    assert main(["cache", "verify"]) == 0
    assert f"shared    {cache.HEADERS}: Inductor's precompiled headers" in capsys.readouterr().out
    # Planted by another user: moved aside and recreated empty, never used.
    (headers / "planted.h.gch").write_bytes(b"crafted")
    if os.geteuid() == 0:
        os.chown(headers / "planted.h.gch", OTHER, OTHER)
        torch.fl.compile(torch.nn.Linear(2, 2), backend="inductor")
        assert list(headers.iterdir()) == []
        assert any(p.name.startswith(cache.QUARANTINE + cache.HEADERS) for p in compile_cache.iterdir())


# issue 22: the root as Inductor uses it, not only as it resolved when checked ----------------------
@needs_root
def test_a_root_through_another_users_link_is_refused(monkeypatch, tmp_path):
    shared = tmp_path / "shared"
    shared.mkdir()
    os.chmod(shared, 0o1777)  # like /tmp
    mine = tmp_path / "mine"
    mine.mkdir(mode=0o700)
    link = shared / "fl-cache"
    link.symlink_to(mine)
    os.lchown(link, OTHER, OTHER)  # planted by another user: they can point it elsewhere at any time
    monkeypatch.setenv("FL_CACHE_DIR", str(link))
    with pytest.raises(CacheTrustError, match=rf"{link} is a symbolic link owned by .*uid {OTHER}.*Fix: name "
                                              rf"the directory itself \(FL_CACHE_DIR={mine}\)"):
        cache.open_entry(registry.get("cpu"))
    assert os.listdir(mine) == []


def test_the_root_is_resolved_once_and_inductor_gets_the_resolved_path(monkeypatch, tmp_path):
    from torch_fl.compiler import jit

    first, second = tmp_path / "first", tmp_path / "second"
    first.mkdir(mode=0o700)
    second.mkdir(mode=0o700)
    link = tmp_path / "link"
    link.symlink_to(first)
    monkeypatch.setenv("FL_CACHE_DIR", str(link))
    entry = cache.open_entry(registry.get("cpu"))
    assert entry.root == first and entry.inductor_dir.parent.parent == first
    jit.use_entry(entry)
    assert os.environ["TORCHINDUCTOR_CACHE_DIR"] == str(first / entry.path.name / "inductor")
    link.unlink()
    link.symlink_to(second)  # swapped after the check: this process keeps what it checked
    again = cache.open_entry(registry.get("cpu"))
    assert again.path == entry.path and os.listdir(second) == []
