"""Fixtures of the analysis tests."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest


@pytest.fixture
def doctor_beside_torch_npu(tmp_path: Path) -> Callable[[dict[str, str]], tuple[subprocess.CompletedProcess, dict]]:
    """`torchfl doctor --json` in a fresh process that imports a fake torch_npu 2.5.1.post1 (released for CANN
    8.2.RC1 and torch 2.5.1+cpu): doctor(env) runs it with env and returns (the process, its JSON)."""
    site = tmp_path / "site"
    (site / "torch_npu").mkdir(parents=True)
    (site / "torch_npu" / "__init__.py").write_text('__version__ = "2.5.1.post1"\n')
    (site / "torch_npu-2.5.1.post1.dist-info").mkdir()
    (site / "torch_npu-2.5.1.post1.dist-info" / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: torch-npu\nVersion: 2.5.1.post1\n")
    out = tmp_path / "doctor.json"

    def doctor(env: dict[str, str]) -> tuple[subprocess.CompletedProcess, dict]:
        env = {**env, "PYTHONPATH": str(site), "FL_BACKEND": "npu", "OMP_NUM_THREADS": "1"}
        proc = subprocess.run([sys.executable, "-c", "from torch_fl.cli import main; raise SystemExit(main())",
                               "doctor", "--json", str(out)], env=env, capture_output=True, text=True, timeout=300)
        return proc, json.loads(out.read_text())

    return doctor
