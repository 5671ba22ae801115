"""Integrity: the manifest records the sha256 of every artifact; every start and `torchfl cache verify`
check the hashes before anything is loaded; an altered entry is never loaded."""

from __future__ import annotations

import json
import logging
import os
import pickle
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from torch_fl.cli import main
from torch_fl.compiler import cache, integrity
from torch_fl.description import registry

# Fake artifacts where Inductor and AOTAutograd put theirs (a real compile is in the slow test).
ARTIFACTS = {
    "inductor/fxgraph/h4/fh4g5d/b7hwrf": b"pickled FX graph cache entry" * 10,
    "inductor/aotautograd/adioch/5cux2n": b"pickled AOTAutograd cache entry" * 10,
    "inductor/yq/cyqmzc.main.so": bytes(range(256)) * 16,
    "inductor/ab/cab2sf.py": b"def call(args):\n    return args\n",
}


def _entry_with_artifacts() -> cache.Entry:
    entry = cache.open_entry(registry.get("cpu"))
    for rel, data in ARTIFACTS.items():
        (entry.path / rel).parent.mkdir(parents=True, exist_ok=True)
        (entry.path / rel).write_bytes(data)
    (entry.inductor_dir / "locks").mkdir()
    (entry.inductor_dir / "locks" / "cyqmzc.lock").write_bytes(b"")
    (entry.inductor_dir / "yq" / ".1234.5678.tmp").write_bytes(b"a write in progress")
    cache.seal(entry)
    cache.release()  # as if the writing process had exited
    return entry


def _flip(path: Path, keep_time: bool = True) -> None:
    """Flip a byte in the middle of `path`; size (and, by default, mtime) unchanged."""
    st = path.stat()
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))
    if keep_time:
        os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))


def test_the_manifest_records_the_sha256_of_every_artifact(compile_cache, capsys):
    entry = _entry_with_artifacts()
    manifest = entry.manifest()
    assert sorted(manifest["artifacts"]) == sorted(ARTIFACTS), "locks and temporary files are not artifacts"
    for rel, (digest, size, _, generation) in manifest["artifacts"].items():
        assert digest == integrity.sha256_file(entry.path / rel) and size == len(ARTIFACTS[rel])
        assert generation == 1
    assert manifest["generation"] == 1 and manifest["verified"] == 0
    assert main(["cache", "verify"]) == 0
    assert f"ok        {entry.path.name}: manifest valid, fingerprint re-hashes to its name, 4 artifacts match" \
        in capsys.readouterr().out


@pytest.mark.parametrize("rel", list(ARTIFACTS))
def test_flipped_bytes_in_any_artifact_make_verify_exit_1_naming_it(rel, compile_cache, capsys):
    entry = _entry_with_artifacts()
    _flip(entry.path / rel)
    assert main(["cache", "verify"]) == 1
    out = capsys.readouterr().out
    assert f"CORRUPT   {entry.path.name}: 1 artifact(s) differ from their recorded sha256" in out
    assert f"  ALTERED {rel}: sha256 " in out and "(same size)" in out
    others = [r for r in ARTIFACTS if r != rel]
    assert not any(f"ALTERED {r}" in out for r in others)


def test_the_first_start_after_a_write_checks_every_hash(compile_cache, caplog):
    entry = _entry_with_artifacts()
    _flip(entry.path / "inductor/yq/cyqmzc.main.so")  # same size, same mtime: only a hash sees it
    with caplog.at_level(logging.WARNING, logger="torch_fl.compile"):
        again = cache.open_entry(registry.get("cpu"))
    assert again.created, "the altered entry is not used"
    assert "inductor/yq/cyqmzc.main.so: sha256" in again.quarantined[0]
    assert "its artifacts changed after they were recorded" in caplog.text


def test_every_start_checks_every_hash_so_a_restored_mtime_hides_nothing(compile_cache):
    # issue 22: the hot path used to check size + mtime only, and an altered pickle whose mtime was put
    # back (touch -r) was unpickled by the next start
    entry = _entry_with_artifacts()
    cache.open_entry(registry.get("cpu"))  # the first start after the write
    cache.release()
    assert entry.manifest()["verified"] == entry.manifest()["generation"]
    _flip(entry.path / "inductor/fxgraph/h4/fh4g5d/b7hwrf", keep_time=True)
    again = cache.open_entry(registry.get("cpu"))
    assert again.created, "the altered entry is not used"
    assert "inductor/fxgraph/h4/fh4g5d/b7hwrf: sha256" in again.quarantined[0]


def test_every_start_hashes_each_recorded_artifact_once(compile_cache, monkeypatch):
    entry = _entry_with_artifacts()
    real = integrity.sha256_file
    for _ in range(2):
        hashed: list = []
        monkeypatch.setattr(integrity, "sha256_file", lambda path, seen=hashed: seen.append(path) or real(path))
        assert not cache.open_entry(registry.get("cpu")).created
        cache.release()
        assert sorted(Path(p).relative_to(entry.path).as_posix() for p in hashed) == sorted(ARTIFACTS)


def test_an_identical_rewrite_is_not_an_alteration(compile_cache):
    entry = _entry_with_artifacts()
    path = entry.path / "inductor/yq/cyqmzc.main.so"
    path.write_bytes(path.read_bytes())  # Inductor may write a file again: new mtime, same bytes
    os.utime(path, ns=(1, 1))
    again = cache.open_entry(registry.get("cpu"))
    assert not again.created
    assert again.manifest()["artifacts"]["inductor/yq/cyqmzc.main.so"][2] == 1


def test_a_missing_artifact_is_named(compile_cache, capsys):
    entry = _entry_with_artifacts()
    (entry.path / "inductor/ab/cab2sf.py").unlink()
    assert main(["cache", "verify"]) == 1
    assert "ALTERED inductor/ab/cab2sf.py: recorded artifact is missing" in capsys.readouterr().out


def test_unrecorded_files_are_recorded_by_the_next_seal(compile_cache):
    entry = _entry_with_artifacts()
    again = cache.open_entry(registry.get("cpu"))
    (again.inductor_dir / "new.so").write_bytes(b"compiled later")
    assert integrity.check(again.path, again.manifest()["artifacts"], full=True).unrecorded == ["inductor/new.so"]
    cache.seal(again)
    manifest = again.manifest()
    assert "inductor/new.so" in manifest["artifacts"] and manifest["generation"] == 2
    assert entry.path == again.path


def test_a_format_1_manifest_is_rebuilt_with_a_clear_reason(compile_cache, capsys):
    entry = _entry_with_artifacts()
    manifest = json.loads((entry.path / cache.MANIFEST).read_text())
    manifest["format"] = 1
    (entry.path / cache.MANIFEST).write_text(json.dumps(manifest))
    assert main(["cache", "verify"]) == 1
    assert "written by an older torch-fl (manifest format 1" in capsys.readouterr().out
    assert cache.open_entry(registry.get("cpu")).created


# A real compile: the payload that a crafted cache entry would run, and what torch-fl does about it.
COMPILE = """
import sys, torch, torch_fl
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2)).eval()
x = torch.randn(2, 4)
run = torch.fl.compile(model) if sys.argv[1] == "fl" else torch.compile(model)
with torch.no_grad():
    torch.testing.assert_close(run(x), model(x))
print("OK", flush=True)
"""


class _Payload:
    def __init__(self, marker: str):
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


@pytest.mark.slow
def test_a_planted_payload_in_a_real_entry_does_not_run(compile_cache, spawn, tmp_path, capsys):
    first = spawn("fl", code=COMPILE)
    out, err = first.communicate(timeout=600)
    assert first.returncode == 0 and "OK" in out, err
    (entry,) = [p for p in compile_cache.iterdir() if not p.name.startswith(".")]
    records = cache.read_manifest(entry)["artifacts"]
    for kind in ("/fxgraph/", "/aotautograd/", ".so", ".py"):  # Inductor's and AOTAutograd's files
        assert any(kind in rel for rel in records), (kind, sorted(records))
    assert main(["cache", "verify"]) == 0
    capsys.readouterr()
    # Patch the compiled code, and replace the pickled cache entries with a payload.
    so = next(rel for rel in records if rel.endswith(".so"))
    _flip(entry / so)
    marker = tmp_path / "payload-ran"
    pickles = [rel for rel in records if "/fxgraph/" in rel or "/aotautograd/" in rel]
    for rel in pickles:
        (entry / rel).write_bytes(pickle.dumps(_Payload(str(marker))))
    assert main(["cache", "verify"]) == 1
    out = capsys.readouterr().out
    for rel in [so, *pickles]:
        assert f"ALTERED {rel}: sha256" in out
    # Without torch-fl's checks, Inductor would unpickle the payload (the control: proves it is live).
    control = dict(os.environ, TORCHINDUCTOR_CACHE_DIR=str(tmp_path / "control"))
    shutil.copytree(entry / "inductor", tmp_path / "control")
    subprocess.run([sys.executable, "-c", COMPILE, "plain"], env=control, capture_output=True, timeout=600)
    assert marker.exists(), "the control run should have run the payload"
    marker.unlink()
    second = spawn("fl", code=COMPILE)
    out, err = second.communicate(timeout=600)
    assert second.returncode == 0 and "OK" in out, err
    assert not marker.exists(), "torch.fl.compile loaded a tampered cache entry"
    assert "is not used: its artifacts changed after they were recorded" in err
    assert any(p.name.startswith(cache.QUARANTINE) for p in compile_cache.iterdir())
