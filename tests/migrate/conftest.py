"""Fixtures of the migration tests."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest


def _run_as_its_user(script: Path, *args: str, fl_device: str | None = None) -> str:
    """Run a user's (fixed) script as its user would on a CPU-only host: in its own folder, with none of this
    session's FL_* settings, no CUDA device visible even on a machine that has one, FL_DEVICE=`fl_device`
    when one is named. Fails the test when the script fails; returns what it printed."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("FL_")}
    env["CUDA_VISIBLE_DEVICES"] = ""
    if fl_device is not None:
        env["FL_DEVICE"] = fl_device
    proc = subprocess.run([sys.executable, str(script), *args], cwd=script.parent, env=env, capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
    return proc.stdout


@pytest.fixture
def run_as_user() -> Callable[..., str]:
    """run_as_user(SCRIPT, *ARGS, fl_device=None) -> its stdout (see _run_as_its_user)."""
    return _run_as_its_user
