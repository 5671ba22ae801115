"""AOT packages carry the fingerprint, artifact hashes and identity; load_aot refuses a package built
for another stack, an altered package, and another model's package."""

from __future__ import annotations

import hashlib
import json
import zipfile
from pathlib import Path

import pytest
import torch

import torch_fl
from torch_fl.cli import main
from torch_fl.compiler import aot
from torch_fl.compiler.aot import AOTFingerprintError, AOTIntegrityError
from torch_fl.compiler.fingerprint import fingerprint
from torch_fl.errors import TorchFLError

FILES = {"model/archive_format": b"pt2", "model/data/aotinductor/model/abc.wrapper.so": bytes(range(256)) * 8}


def _package(path, components: dict[str, str] | None, *, identity: dict[str, str] | None = None,
             files: dict[str, bytes] | None = None, record_files: dict[str, bytes] | None = None) -> str:
    """A .pt2-shaped archive whose fingerprint record says `components` (None: no record), with the
    hashes of `record_files` (default: the files it holds) and `identity`."""
    files = FILES if files is None else files
    with zipfile.ZipFile(path, "w") as archive:
        for name, data in files.items():
            archive.writestr(name, data)
        if components is not None:
            archive.writestr(f"model/extra/{aot.FINGERPRINT_FILE}", "{}")
    with zipfile.ZipFile(path) as archive:
        hashes = aot._member_hashes(archive)
    if record_files is not None:
        hashes = {name.removeprefix("model/"): hashlib.sha256(data).hexdigest()
                  for name, data in record_files.items()}
    if components is not None:
        with zipfile.ZipFile(path, "w") as archive:
            for name, data in files.items():
                archive.writestr(name, data)
            archive.writestr(f"model/extra/{aot.FINGERPRINT_FILE}", json.dumps(
                {"format": 2, "description": "cpu", "components": components, "model": "fake",
                 "artifacts": hashes, "identity": identity or {}}))
    return str(path)


@pytest.fixture
def never_loads(monkeypatch):
    """The check must happen before torch ever opens the package."""
    import torch._inductor

    def refuse(*args, **kwargs):
        raise AssertionError("aoti_load_package was called on a package that should be refused")

    monkeypatch.setattr(torch._inductor, "aoti_load_package", refuse)


def test_load_aot_refuses_another_stack_and_names_what_differs(tmp_path, never_loads):
    components = dict(fingerprint(torch_fl.description("cpu")).components)
    components.update(torch="2.12.0+cpu", cxx="g++ 9.4.0")
    package = _package(tmp_path / "other.pt2", components)
    with pytest.raises(AOTFingerprintError) as info:
        torch.fl.load_aot(package)
    message = str(info.value)
    assert f"torch 2.12.0+cpu -> {torch.__version__}" in message and "cxx g++ 9.4.0 -> " in message
    assert "torchfl aot" in message and "ignore=" in message
    assert set(info.value.differences) == {"torch", "cxx"}


def test_a_package_without_a_fingerprint_is_refused(tmp_path, never_loads):
    with pytest.raises(AOTFingerprintError, match="has no torch-fl fingerprint"):
        torch.fl.load_aot(_package(tmp_path / "plain.pt2", None))
    (tmp_path / "junk.pt2").write_text("not a zip")
    with pytest.raises(AOTFingerprintError, match="not a readable AOT package"):
        torch.fl.load_aot(tmp_path / "junk.pt2")


def test_aot_check_command(tmp_path, capsys):
    components = dict(fingerprint(torch_fl.description("cpu")).components)
    same = _package(tmp_path / "same.pt2", components)
    assert main(["aot", "--check", same]) == 0
    assert "matches this stack" in capsys.readouterr().out
    other = _package(tmp_path / "other.pt2", {**components, "python": "3.9.0"})
    assert main(["aot", "--check", other]) == 1
    assert "MISMATCH: python 3.9.0 -> " in capsys.readouterr().out


SO = "model/data/aotinductor/model/abc.wrapper.so"


def _patched(data: bytes) -> bytes:
    """`data` with four bytes in the middle flipped (a patched code section, size unchanged)."""
    middle = len(data) // 2
    return data[:middle] + bytes(b ^ 0xFF for b in data[middle:middle + 4]) + data[middle + 4:]


def _here() -> dict[str, str]:
    return dict(fingerprint(torch_fl.description("cpu")).components)


def test_a_patched_file_in_a_package_is_refused_and_named(tmp_path, never_loads, capsys):
    package = _package(tmp_path / "patched.pt2", _here(), files={**FILES, SO: _patched(FILES[SO])},
                       record_files=FILES)
    with pytest.raises(AOTIntegrityError) as info:
        torch.fl.load_aot(package)
    assert info.value.problems == [f"{SO.removeprefix('model/')}: sha256 "
                                   f"{hashlib.sha256(FILES[SO]).hexdigest()[:16]}... recorded, "
                                   f"{hashlib.sha256(_patched(FILES[SO])).hexdigest()[:16]}... now (altered)"]
    assert main(["aot", "--check", package]) == 1
    out = capsys.readouterr().out
    assert f"ALTERED: {SO.removeprefix('model/')}" in out and "matches this stack" not in out


def test_a_file_added_to_or_removed_from_a_package_is_refused(tmp_path, never_loads):
    added = _package(tmp_path / "added.pt2", _here(), files={**FILES, "model/data/extra.so": b"x"},
                     record_files=FILES)
    with pytest.raises(AOTIntegrityError, match=r"data/extra\.so: not in the record"):
        torch.fl.load_aot(added)
    removed = _package(tmp_path / "removed.pt2", _here(), files={"model/archive_format": b"pt2"},
                       record_files=FILES)
    with pytest.raises(AOTIntegrityError, match=r"abc\.wrapper\.so: recorded but missing"):
        torch.fl.load_aot(removed)


def test_a_package_without_artifact_hashes_is_refused(tmp_path, never_loads):
    path = tmp_path / "old.pt2"
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("model/archive_format", "pt2")
        archive.writestr(f"model/extra/{aot.FINGERPRINT_FILE}", json.dumps(
            {"format": 1, "description": "cpu", "components": _here(), "model": "fake"}))
    with pytest.raises(AOTIntegrityError, match=r"records no artifact hashes .*format 1"):
        torch.fl.load_aot(path)


class _Net(torch.nn.Module):
    def __init__(self, out: int = 2):
        super().__init__()
        self.fc = torch.nn.Linear(4, out)

    def forward(self, x):
        return self.fc(x)


def test_a_swapped_package_is_refused_when_the_model_or_identity_is_given(tmp_path, never_loads):
    torch.manual_seed(0)
    built_from = _Net()
    package = _package(tmp_path / "net.pt2", _here(),
                       identity={**aot.model_identity(built_from), "graph": "a" * 64, "inputs": "b" * 64})
    other_model = torch.nn.Sequential(torch.nn.Linear(4, 2))
    with pytest.raises(AOTIntegrityError) as info:
        torch.fl.load_aot(package, model=other_model)
    keys = [p.split(":")[0] for p in info.value.problems]
    assert keys == ["model", "state", "weights"]
    assert "_Net, expected torch.nn.modules.container.Sequential" in info.value.problems[0]
    # Same class, same shapes, other weights (another checkpoint of the architecture).
    with pytest.raises(AOTIntegrityError) as info:
        torch.fl.load_aot(package, model=_Net())
    assert [p.split(":")[0] for p in info.value.problems] == ["weights"]
    with pytest.raises(AOTIntegrityError, match=r"graph: the package holds aaaaaaaaaaaaaaaa\.\.\., expected"):
        torch.fl.load_aot(package, expect={"graph": "c" * 64})
    with pytest.raises(ValueError, match="unknown identity keys"):
        torch.fl.load_aot(package, expect={"grpah": "c" * 64})
    # The right model and identity pass the integrity and identity checks (and reach the loader).
    with pytest.raises(AssertionError, match="aoti_load_package was called"):
        torch.fl.load_aot(package, model=built_from, expect={"graph": "a" * 64})


def test_a_pinned_sha256_is_checked(tmp_path, never_loads, capsys):
    package = _package(tmp_path / "pinned.pt2", _here())
    with pytest.raises(AOTIntegrityError, match=r"sha256 is .*, expected 0000"):
        torch.fl.load_aot(package, sha256="0" * 64)
    good = hashlib.sha256(Path(package).read_bytes()).hexdigest()
    assert main(["aot", "--check", package, "--sha256", "0" * 64]) == 1
    assert main(["aot", "--check", package, "--sha256", good]) == 0
    assert "and the package its pinned sha256" in capsys.readouterr().out


def test_aot_false_in_the_description_is_an_error(use_description, tmp_path):
    use_description('aot = false\nbackend = "eager"')
    with pytest.raises(TorchFLError, match=r"compile\.aot = false"):
        torch.fl.export_aot(torch.nn.Linear(2, 2), (torch.randn(1, 2),), tmp_path / "m.pt2")


@pytest.mark.slow
def test_a_real_package_round_trips_and_is_refused_after_an_upgrade(tmp_path, monkeypatch):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2)).eval()
    x = torch.randn(2, 4)
    result = torch.fl.export_aot(model, (x,), tmp_path / "mlp.pt2", label="mlp")
    meta = aot.read_package_fingerprint(result.path)
    assert any(name.endswith(".so") for name in meta["artifacts"])
    assert set(meta["identity"]) == set(aot.IDENTITY_KEYS)
    assert meta["components"] == fingerprint(torch_fl.description("cpu")).components
    assert meta["inputs"] == ["2x4 float32"] and meta["model"] == "mlp"
    assert not list(tmp_path.glob(".*tmp*")), "no temporary package is left behind"
    loaded = torch.fl.load_aot(result.path, model=model, expect=meta["identity"], sha256=result.metadata["sha256"])
    torch.testing.assert_close(loaded(x), model(x))
    other = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2)).eval()
    with pytest.raises(AOTIntegrityError, match="weights: the package holds"):
        torch.fl.load_aot(result.path, model=other)  # another checkpoint of the same architecture
    real_version = torch.__version__
    monkeypatch.setattr(torch, "__version__", "2.99.0")
    with pytest.raises(AOTFingerprintError, match=r"torch .* -> 2\.99\.0"):
        torch.fl.load_aot(result.path)
    torch.testing.assert_close(torch.fl.load_aot(result.path, ignore=["torch"])(x), model(x))
    # The same package on a CPU without the vector ISA it was compiled for.
    monkeypatch.setattr(torch, "__version__", real_version)
    import torch._inductor.cpu_vec_isa as cpu_vec_isa

    monkeypatch.setattr(cpu_vec_isa, "valid_vec_isa_list", lambda: [])
    with pytest.raises(AOTFingerprintError, match=r"cpu_isa .* -> no vector ISA") as info:
        torch.fl.load_aot(result.path)
    assert list(info.value.differences) == ["cpu_isa"]


@pytest.mark.slow
def test_a_real_package_with_a_patched_code_section_is_refused(tmp_path, capsys):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2)).eval()
    result = torch.fl.export_aot(model, (torch.randn(2, 4),), tmp_path / "mlp.pt2")
    assert main(["aot", "--check", str(result.path)]) == 0
    capsys.readouterr()
    with zipfile.ZipFile(result.path) as archive:
        so = next(i for i in archive.infolist() if i.filename.endswith(".so"))
        assert so.compress_type == zipfile.ZIP_STORED
        data_start = so.header_offset + 30 + len(so.filename.encode()) + len(so.extra)
    raw = bytearray(result.path.read_bytes())
    middle = data_start + so.file_size // 2  # inside the .so: its code, in place, size unchanged
    raw[middle:middle + 4] = bytes(b ^ 0xFF for b in raw[middle:middle + 4])
    patched = tmp_path / "patched.pt2"
    patched.write_bytes(bytes(raw))
    assert main(["aot", "--check", str(patched)]) == 1
    out = capsys.readouterr().out
    member = so.filename.split("/", 1)[1]
    assert f"ALTERED: {member}: sha256 " in out and "matches this stack" not in out
    with pytest.raises(AOTIntegrityError, match=member):
        torch.fl.load_aot(patched)
