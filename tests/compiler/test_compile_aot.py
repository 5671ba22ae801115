"""AOT packages carry the fingerprint; load_aot refuses a package built for another stack."""

from __future__ import annotations

import json
import zipfile

import pytest
import torch

import torch_fl
from torch_fl.cli import main
from torch_fl.compiler import aot
from torch_fl.compiler.aot import AOTFingerprintError
from torch_fl.compiler.fingerprint import fingerprint
from torch_fl.errors import TorchFLError


def _package(path, components: dict[str, str] | None) -> str:
    """A .pt2-shaped archive whose fingerprint record says `components` (None: no record)."""
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("model/archive_format", "pt2")
        if components is not None:
            archive.writestr(f"model/extra/{aot.FINGERPRINT_FILE}", json.dumps(
                {"format": 1, "description": "cpu", "components": components, "model": "fake"}))
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
    assert meta["components"] == fingerprint(torch_fl.description("cpu")).components
    assert meta["inputs"] == ["2x4 float32"] and meta["model"] == "mlp"
    assert not list(tmp_path.glob(".*tmp*")), "no temporary package is left behind"
    loaded = torch.fl.load_aot(result.path)
    torch.testing.assert_close(loaded(x), model(x))
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
