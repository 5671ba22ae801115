"""Run a Python snippet in a fresh interpreter, on an emulated chip when one is named.

A check that imports a vendor's plugin under its name (torch_npu, torch_mlu, ...) needs FL_DEVICE set before
torch-fl is imported, and a crash (a segfault, a PyTorch internal assert) must fail the test rather than end
pytest: so such checks run in a child process. Each test module used to spell that out; this is the one
place. Importable from every test folder (tests/ is on sys.path through tests/conftest.py).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]


def run_python(code: str, chip: str | None = None, *, env: Mapping[str, str] | None = None,
               timeout: float = 600) -> subprocess.CompletedProcess[str]:
    """`python -c CODE` in the repository root with one torch thread, FL_DEVICE=emu:CHIP when `chip` is named,
    on `env` (default: this process's environment, which tests/conftest.py has cleared of FL_* settings).
    Fails the test when the child exits non-zero (a negative code is the signal that ended it) or prints a
    PyTorch internal assert; returns the finished process for its output."""
    child = {**(os.environ if env is None else env), "OMP_NUM_THREADS": "1"}
    if chip is not None:
        child["FL_DEVICE"] = f"emu:{chip}"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=timeout,
                          env=child, cwd=REPO, check=False)
    assert done.returncode == 0, f"exit {done.returncode} (a negative code is a signal)\n{done.stderr[-3000:]}"
    assert "INTERNAL ASSERT" not in done.stdout + done.stderr, (done.stdout + done.stderr)[-3000:]
    return done


def run_on_chip(code: str, chip: str, *, env: Mapping[str, str] | None = None) -> Any:
    """run_python(CODE, CHIP) for a snippet that ends by printing one JSON line: that line, parsed."""
    return json.loads(run_python(code, chip, env=env).stdout.strip().splitlines()[-1])
