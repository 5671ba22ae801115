"""External truth for the emulated device: PyTorch's own ModuleInfo and OptimInfo databases.

Every float32 sample of ``common_modules.module_db`` runs forward and backward on emu:cuda and emu:mps
and on the plain CPU (scripts/moduledb_harness.py: outputs, parameter and input gradients equal, at
PyTorch's float32 tolerances or the ModuleInfo's own; a sample both reject agrees). Every ``common_optimizers.optim_db`` optimizer and configuration steps a small model on
both. At least 99% must agree; the rest are listed in the harness's KNOWN with the reason, and a sample that starts
to pass (or one that fails for another reason) fails the test until the list is updated.
"""

from __future__ import annotations

import importlib.util
import sys
import warnings
from collections import Counter
from pathlib import Path

import pytest
import torch

import torch_fl

pytest.importorskip("expecttest")  # torch.testing._internal needs it (dev extras)

# The sample runner, the comparison and the documented remainder (KNOWN) are scripts/moduledb_harness.py's,
# which scripts/moduledb_emu.py runs on any chip (a renamed one such as npu in a fresh process).
_HARNESS = Path(__file__).resolve().parents[2] / "scripts" / "moduledb_harness.py"
_spec = importlib.util.spec_from_file_location("moduledb_harness", _HARNESS)
harness = importlib.util.module_from_spec(_spec)
sys.modules.setdefault("moduledb_harness", harness)
_spec.loader.exec_module(harness)

MIN_SHARE = 0.99

NOT_RUN = harness.NOT_RUN


def run_module_db(device: torch.device) -> tuple[int, int, dict[str, list[str]]]:
    """(samples, agreeing, failures by module) of float32 module_db forward+backward on `device`: a sample
    agrees when it equals the CPU or both reject it (harness.check_sample)."""
    total = passed = 0
    failures: dict[str, list[str]] = {}
    for _, info, index, sample in harness.samples():
        total += 1
        result, detail = ("fail", f"samples: {sample}") if isinstance(sample, Exception) else \
            harness.check_sample(info, sample, device, seed=index)
        if result in ("pass", "skip"):
            passed += 1
        else:
            failures.setdefault(info.name, []).append(f"{result}: {detail.splitlines()[0] if detail else ''}")
    return total, passed, failures


run_optim_db = harness.run_optim_db


def _check(chip: str, total: int, passed: int, failures: dict[str, list[str]], known: dict | None = None) -> None:
    if known is None:
        problems = harness.check(chip, failures)
    else:  # optim_db's own list
        problems = [f"{chip}: {name}: {reasons}" for name, reasons in failures.items() if (chip, name) not in known]
    assert not problems, problems
    assert passed / total >= MIN_SHARE, f"{chip}: {passed}/{total}"


OPTIM_KNOWN: dict[tuple[str, str], tuple[int, str]] = {}

# database -> (its runner, what it counts, its documented remainder: None is the harness's KNOWN)
DATABASES = {"module_db": (run_module_db, "float32 samples (forward and backward)", None),
             "optim_db": (run_optim_db, "optimizer configurations (steps)", OPTIM_KNOWN)}


@pytest.mark.slow
@pytest.mark.parametrize("chip", ["emu:cuda", "emu:mps"])
@pytest.mark.parametrize("database", DATABASES)
def test_the_database_runs_equal_the_cpu(monkeypatch, database, chip):
    run, counted, known = DATABASES[database]
    monkeypatch.setenv("FL_DEVICE", chip)
    torch_fl.reset()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        total, passed, failures = run(torch_fl.device())
    print(f"{chip}: {database} {passed}/{total} {counted} equal to the CPU",
          dict(Counter({k: len(v) for k, v in failures.items()})))
    _check(chip, total, passed, failures, known)
