"""The one CUDA-API table (migrate/cuda_api.py): importable without torch, consistent, meaning-keeping."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from torch_fl.migrate import cuda_api
from torch_fl.migrate.cuda_api import CUDA_API, backend_flag, lookup

SRC = Path(__file__).resolve().parents[2] / "src"


def test_importable_without_torch() -> None:
    # A hook environment has no torch: importing torch fails there, and the table must not need it.
    code = ("import sys; sys.modules['torch'] = None\n"
            "import importlib.util, pathlib\n"
            f"spec = importlib.util.spec_from_file_location('cuda_api', r'{SRC}/torch_fl/migrate/cuda_api.py')\n"
            "m = sys.modules['cuda_api'] = importlib.util.module_from_spec(spec); spec.loader.exec_module(m)\n"
            "print(m.lookup('torch.cuda.is_available').replacement)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "torch.fl.is_accelerator"


def test_is_available_keeps_meaning_on_cpu_host() -> None:
    # torch.fl.is_available() is True on a CPU-only host; the rewrite must be False there, as before.
    entry = CUDA_API["torch.cuda.is_available"]
    assert entry.replacement == "torch.fl.is_accelerator" and entry.safety == "safe"
    assert entry.alias == "is_available"  # the runtime alias asks about its (accelerator) target


@pytest.mark.parametrize("name", ["device_count", "manual_seed", "manual_seed_all", "memory_reserved"])
def test_fixes_that_change_cpu_behaviour_are_unsafe(name: str) -> None:
    entry = CUDA_API[f"torch.cuda.{name}"]
    assert entry.safety == "unsafe" and entry.note


def test_every_fix_has_a_replacement_and_every_entry_a_remedy() -> None:
    for entry in CUDA_API.values():
        assert (entry.replacement is None) == (entry.safety is None), entry.name
        assert entry.remedy, entry.name
        if entry.safety == "unsafe":
            assert entry.note, f"{entry.name}: an unsafe fix says why"


def test_facade_names_exist_in_the_runtime() -> None:
    import torch_fl
    from torch_fl.migrate import cuda_surface

    for entry in CUDA_API.values():
        if entry.replacement and entry.replacement.startswith("torch.fl."):
            assert hasattr(torch_fl, entry.replacement.removeprefix("torch.fl.")), entry.name
    handled = {name for name in dir(cuda_surface.CudaAPI) if not name.startswith("_")}
    for facade_call, names in cuda_api.FACADE.items():
        if facade_call in ("autocast", "GradScaler"):
            continue  # amp is patched by class, not through CudaAPI
        for name in names:
            if name.startswith("torch.cuda."):
                assert name.removeprefix("torch.cuda.") in handled, name


def test_lookup_through_submodules_and_attributes() -> None:
    assert lookup("torch.cuda.memory.empty_cache").short == "empty_cache"
    assert lookup("torch.cuda.amp.autocast_mode.autocast").short == "amp.autocast"
    assert lookup("torch.cuda.amp.grad_scaler.GradScaler").short == "amp.GradScaler"
    assert lookup("torch.cuda.nvtx.range_push").short == "nvtx"
    assert lookup("torch.cuda.no_such_thing") is None
    assert lookup("torch.cuda.FloatTensor").kind == "type"
    assert lookup("torch.version.cuda").kind == "attribute"


def test_device_string_regex_and_replacement() -> None:
    assert cuda_api.CUDA_DEVICE.fullmatch("cuda:3").group(1) == "3"
    assert cuda_api.CUDA_DEVICE.fullmatch("cudax") is None
    assert cuda_api.device_replacement(None) == "torch.fl.device()"
    assert cuda_api.device_replacement("1") == 'torch.fl.device("acc1")'


def test_backend_flags_most_specific() -> None:
    assert backend_flag("torch.backends.cudnn.deterministic").portable.startswith("torch.use_deterministic")
    assert backend_flag("torch.backends.cuda.enable_flash_sdp").name == "torch.backends.cuda.sdp"
    assert backend_flag("torch.backends.cudnn.benchmark").portable is None
    assert backend_flag("torch.nn.Linear") is None


def test_is_accelerator_answers_for_types_and_devices_without_needing_them() -> None:
    import torch

    import torch_fl  # noqa: F401

    # A CPU-only machine (this test suite's): the default device is the host.
    assert torch.fl.is_accelerator() is (torch.fl.device().type != "cpu")
    assert torch.fl.is_accelerator("cuda") and torch.fl.is_accelerator("cuda:1") and torch.fl.is_accelerator("npu")
    assert not torch.fl.is_accelerator("cpu") and not torch.fl.is_accelerator(torch.zeros(1).device)
    assert not torch.fl.is_accelerator(torch.device("meta"))
