"""The suite cannot hang CI: a per-test timeout (pytest-timeout, a dev dependency) and a session bound in
`make test` (issue 22: a gloo destructor once held the whole suite for 30 minutes)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from torch_fl import _toml

ROOT = Path(__file__).resolve().parents[1]


def test_pyproject_sets_a_per_test_timeout_and_the_dev_extra_installs_it():
    data = _toml.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    options = data["tool"]["pytest"]["ini_options"]
    assert 0 < int(options["timeout"]) <= 900
    assert any(dep.startswith("pytest-timeout") for dep in data["project"]["optional-dependencies"]["dev"])
    assert "--session-timeout=" in (ROOT / "Makefile").read_text(encoding="utf-8")


@pytest.mark.slow
def test_a_hanging_test_is_ended(tmp_path):
    (tmp_path / "test_hang.py").write_text("import time\n\ndef test_hangs():\n    time.sleep(60)\n")
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-o", "timeout=2",
                           str(tmp_path / "test_hang.py")], cwd=tmp_path, capture_output=True, text=True,
                          timeout=50)
    assert done.returncode != 0 and "Timeout" in done.stdout + done.stderr
