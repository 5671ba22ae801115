"""Fixes keep meaning on every host (issue 11): a CUDA-style trainer that already runs on the CPU prints
the same after `torchfl fix` (safe fixes) as before, and still trains after `--unsafe-fixes`.

The fixture (fixtures/train_portable_cuda_style.py) is our own, written in nanoGPT's train.py style:
device chosen with torch.cuda.is_available(), `device_type == "cuda"` guarding pin_memory(), a
torch.cuda.amp.GradScaler, torch.cuda.synchronize() under a CUDA check.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

pytest.importorskip("libcst")

from torch_fl.migrate.fix import fix_paths, fix_source

FIXTURE = Path(__file__).parent / "fixtures" / "train_portable_cuda_style.py"


def test_rewrites_say_accelerator_not_available() -> None:
    source = ("import torch\n"
              "device = 'cuda' if torch.cuda.is_available() else 'cpu'\n"
              "if torch.cuda.is_available():\n    torch.backends.cudnn.benchmark = True\n    model.cuda()\n"
              "if device_type == 'cuda':\n    x = x.pin_memory()\n")
    safe = fix_source(source).new_source
    assert "device = torch.fl.device()" in safe
    assert "if torch.fl.is_accelerator():" in safe
    assert "torch.fl.is_available()" not in safe  # True on a CPU-only host: never the target
    assert "if device_type == 'cuda':" in safe  # FL902 is unsafe
    unsafe = fix_source(source, unsafe=True).new_source
    assert "if torch.fl.is_accelerator(device_type):" in unsafe
    assert "device_type == torch.fl.device_type()" not in unsafe  # true on the CPU: the old bug


@pytest.mark.slow
def test_safe_fixes_keep_cpu_output_and_unsafe_fixes_still_train(tmp_path: Path, run_as_user) -> None:
    runs = {}
    for mode in ("original", "safe", "unsafe"):
        folder = tmp_path / mode
        folder.mkdir()
        script = folder / FIXTURE.name
        shutil.copy(FIXTURE, script)
        if mode != "original":
            report = fix_paths([script], unsafe=mode == "unsafe")
            assert report.errors == [] and report.applied > 0
            assert fix_paths([script], unsafe=mode == "unsafe").changed_files == []  # idempotent
        runs[mode] = run_as_user(script, "--max_iters=4")
    assert "device cpu" in runs["original"] and "iter 3: loss" in runs["original"]
    assert runs["safe"] == runs["original"]
    # The unsafe fixes change behaviour only on non-CUDA accelerators; on the CPU the run is the same too.
    assert runs["unsafe"] == runs["original"]
    unsafe_source = (tmp_path / "unsafe" / FIXTURE.name).read_text()
    assert "if torch.fl.is_accelerator(device_type):" in unsafe_source  # pin_memory() stays off on the CPU
    assert "torch.cuda.amp" not in unsafe_source
