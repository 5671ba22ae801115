"""`torchfl cache info | clear | verify` and `torchfl warmup` (the Inductor-free parts)."""

from __future__ import annotations

import json

import pytest
import torch

import torch_fl
from torch_fl.cli import main
from torch_fl.compiler import cache
from torch_fl.description import registry


def _stale_and_current(monkeypatch) -> tuple[cache.Entry, cache.Entry]:
    real = torch.__version__
    monkeypatch.setattr(torch, "__version__", "2.10.0")
    stale = cache.open_entry(registry.get("cpu"))
    cache.release()
    monkeypatch.setattr(torch, "__version__", real)
    current = cache.open_entry(registry.get("cpu"))
    cache.release()
    return stale, current


def test_info_lists_entries_and_marks_the_current_one(monkeypatch, compile_cache, capsys, tmp_path):
    stale, current = _stale_and_current(monkeypatch)
    assert main(["cache", "info", "--json", str(tmp_path / "info.json")]) == 0
    out = capsys.readouterr().out
    assert f"compile cache root: {compile_cache} (from FL_CACHE_DIR)" in out
    assert f"* {current.path.name}" in out and f"  {stale.path.name}" in out
    assert f"stale: torch 2.10.0 -> {torch.__version__}" in out
    assert "current fingerprint components:" in out and f"torch_fl     {torch_fl.__version__}" in out
    data = json.loads((tmp_path / "info.json").read_text())
    assert data["current"] == current.path.name and len(data["entries"]) == 2


def test_clear_stale_keeps_the_current_entry_and_clear_all_removes_everything(monkeypatch, compile_cache,
                                                                             capsys):
    stale, current = _stale_and_current(monkeypatch)
    assert main(["cache", "clear", "--stale"]) == 0
    assert not stale.path.exists() and current.path.exists()
    assert f"removed {stale.path}" in capsys.readouterr().out
    assert main(["cache", "clear", "--all"]) == 0
    assert not current.path.exists()
    assert main(["cache", "clear"]) == 0
    assert "nothing to remove" in capsys.readouterr().out


def test_verify_on_an_empty_cache(capsys):
    assert main(["cache", "verify"]) == 0
    assert "0 entries" in capsys.readouterr().out


def test_warmup_reports_each_shape(use_description, tiny_model, capsys, compile_cache):
    from torch_fl.report import set_progress

    use_description('backend = "eager"\ndynamic_shapes = "static"')
    previous = set_progress(True)  # as on a terminal (capsys's stderr is not one)
    try:
        assert main(["warmup", tiny_model, "--shapes", "2x4", "3x4", "2x4"]) == 0
    finally:
        set_progress(previous)
    captured = capsys.readouterr()
    assert "compilations  2 (1 recompilations)" in captured.out
    assert "no compilation (graph reused)" in captured.out  # the third shape was seen before
    assert "[1/3] 2x4: compiling" in captured.err
    (entry,) = [s for s in cache.scan(compile_cache) if s.status == "ok"]
    assert [r["shape"] for r in entry.manifest["warmup"]] == ["2x4", "3x4", "2x4"]


def test_warmup_with_jit_off_has_nothing_to_do(use_description, tiny_model, capsys):
    use_description("jit = false")
    assert main(["warmup", tiny_model]) == 0
    assert "nothing to warm up" in capsys.readouterr().out


def test_warmup_rejects_a_shape_of_the_wrong_rank(use_description, tiny_model, capsys):
    use_description('backend = "eager"')
    assert main(["warmup", tiny_model, "--shapes", "2x4,3x4"]) == 1
    assert "gives 2 shape(s), the model takes 1 tensor input(s) (2x4)" in capsys.readouterr().err


# issue 22: clear removes only what torch-fl created, and never works on / or a home directory ---------
def test_clear_keeps_folders_torch_fl_did_not_create(monkeypatch, compile_cache, capsys):
    stale, current = _stale_and_current(monkeypatch)
    photos = compile_cache / "photos"
    photos.mkdir()
    (photos / "holiday.jpg").write_bytes(b"\xff\xd8 not a cache entry")
    assert (current.path / cache.MARKER).is_file()
    for flags in (["--corrupt"], ["--all"]):
        assert main(["cache", "clear", *flags]) == 0
        captured = capsys.readouterr()
        assert (photos / "holiday.jpg").is_file()
        assert f"kept    {photos}: torch-fl did not create it (no {cache.MARKER} marker" in captured.err
    assert not stale.path.exists() and not current.path.exists()


def test_an_old_entry_without_the_marker_is_still_removable(monkeypatch, compile_cache, capsys):
    entry = cache.open_entry(registry.get("cpu"))
    cache.release()
    (entry.path / cache.MARKER).unlink()  # written by a torch-fl from before the marker: a valid manifest
    assert main(["cache", "clear", "--all"]) == 0
    assert not entry.path.exists()


@pytest.mark.parametrize("where", ["/", "home", "above home"])
@pytest.mark.parametrize("action", [["info"], ["verify"], ["clear", "--all"], ["clear", "--corrupt"]])
def test_broad_roots_are_refused_for_every_action(where, action, monkeypatch, tmp_path, capsys):
    home = tmp_path / "home" / "alice"
    home.mkdir(parents=True)
    (home / "thesis.tex").write_text("years of work")
    monkeypatch.setenv("HOME", str(home))
    root = {"/": "/", "home": str(home), "above home": str(home.parent)}[where]
    monkeypatch.setenv("FL_CACHE_DIR", root)
    assert main(["cache", *action]) == 1
    out = capsys.readouterr().out
    assert f"REFUSED   compile cache root {root} (from FL_CACHE_DIR) is refused: it is " in out
    assert "Fix: point FL_CACHE_DIR at a directory of its own" in out
    assert (home / "thesis.tex").is_file() and sorted(p.name for p in home.iterdir()) == ["thesis.tex"]


def test_open_entry_refuses_a_home_directory_root(monkeypatch, tmp_path):
    from torch_fl.compiler.trust import CacheTrustError

    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("FL_CACHE_DIR", str(tmp_path))
    with pytest.raises(CacheTrustError, match="is refused: it is your home directory"):
        cache.open_entry(registry.get("cpu"))
    assert list(tmp_path.iterdir()) == []
