"""A safe fix is never wrong (issue 37 item 1): every safe fix form, run before and after `torchfl fix`.

fixtures/safe_forms/ holds one small program per family of safe fixes (our own code: device strings,
.cuda(), ordinals, device choices, autocast regions in every spelling the fix rewrites, including
`torch.autocast(...).__enter__()`, gradient scalers, runtime calls, guarded literals, the default device,
type names). fixtures/held_back/ holds the forms whose check must not be fixed alone (a comparison paired
with the check, an asserted CUDA device, a helper naming CUDA, an index the check picks, an autocast
applied as a decorator factory). Each program prints what it computed; the runs are compared:

* the CPU host: the fixed program prints exactly what the original printed;
* an emulated chip (FL_DEVICE=emu:npu, emu:mps), where the original takes its CPU path (and prints what
  it printed on the CPU host): a fixed safe form must print what the original prints on a CUDA host
  (ON_CUDA, the accelerator's name read as one): autocast entered, bfloat16 matmuls, the scalers on; a
  held-back form is left as it ran there. Either way the fixed program runs, and a safe form's own code
  calls no CUDA-only function.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("libcst")

from torch_fl.migrate.fix import fix_paths, fix_source
from torch_fl.migrate.scan import scan_source

HERE = Path(__file__).parent
SAFE = sorted((HERE / "fixtures" / "safe_forms").glob("*.py"))
HELD = sorted((HERE / "fixtures" / "held_back").glob("*.py"))
CHIPS = ("emu:npu", "emu:mps")
# An emulated chip's tensors print as its own type or as "emu"; the CUDA alias's as the same chip.
_ACCELERATOR = re.compile(r"\b(cuda|npu|mps|emu)\b")


def _run(folder: Path, device: str | None = None, alias: bool = False) -> dict[str, dict]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("FL_")}
    env["CUDA_VISIBLE_DEVICES"] = ""
    if device:
        env["FL_DEVICE"] = device
    if alias:
        env["FL_CUDA_ALIAS"] = "1"
    programs = sorted(str(p) for p in folder.glob("*.py"))
    proc = subprocess.run([sys.executable, str(HERE / "target_runner.py"), *programs], env=env, cwd=folder,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return {r["path"]: r for r in (json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{"))}


def _behaviour(run: dict) -> tuple[str, str]:
    return run["status"], _ACCELERATOR.sub("acc", run["stdout"])


@pytest.fixture(scope="module")
def trees(tmp_path_factory) -> dict[str, Path]:
    """Each corpus as written and after a safe `torchfl fix`."""
    made = {}
    for kind, programs in (("safe", SAFE), ("held", HELD)):
        for state in ("original", "fixed"):
            folder = tmp_path_factory.mktemp(f"{kind}-{state}")
            for program in programs:
                shutil.copy(program, folder / program.name)
            if state == "fixed":
                report = fix_paths([folder])
                assert report.errors == [] and not any(f.not_applied for f in report.files)
            made[f"{kind}-{state}"] = folder
    return made


def test_every_safe_form_is_fixed_safely_and_held_back_forms_are_not() -> None:
    for program in SAFE:
        source = program.read_text()
        findings = scan_source(source, program.name)
        assert findings and all(f.safety == "safe" for f in findings), (program.name, findings)
        result = fix_source(source, path=program.name)
        assert result.not_applied == [] and result.skipped_unsafe == []
        assert [f for f in scan_source(result.new_source) if f.fixable] == []  # nothing left to fix
    for program in HELD:
        source = program.read_text()
        checks = [f for f in scan_source(source, program.name) if f.code in ("FL201", "FL301")]
        assert checks and all(f.safety != "safe" for f in checks), (program.name, checks)
        assert "torch.cuda.is_available()" in fix_source(source).new_source or "FL301" in {f.code for f in checks}


@pytest.mark.slow
def test_the_cpu_host_prints_the_same_before_and_after(trees: dict[str, Path]) -> None:
    for kind in ("safe", "held"):
        before, after = _run(trees[f"{kind}-original"]), _run(trees[f"{kind}-fixed"])
        assert set(before) == set(after) and before
        for name, run in before.items():
            assert run["status"] == "ok", (name, run)
            assert after[name]["status"] == "ok" and after[name]["stdout"] == run["stdout"], (name, run, after[name])


# What each safe form prints on a CUDA host, an accelerator's name read as "acc".
ON_CUDA = {
    "autocast_regions.py": str(["torch.bfloat16"] * 7) + "\n",
    "choice.py": "True 5.0 False\n",
    "default_device.py": "acc acc 3.0\ncpu\n",
    "devices.py": str([("acc", v) for v in (3.0, 3.0, 6.0, 9.0, 12.0, 3.0, 3.0, 3.0)]) + "\n",
    "guarded_literals.py": "['cpu', 'acc'] acc\n",
    "runtime_calls.py": "0 4.0\nTrue\n",
    "scalers.py": "[True, True, True, True] 1024.0\n",
    "type_names.py": "True False\n",
}


# Where the CUDA alias (FL_CUDA_ALIAS=1: the original believes it runs on CUDA, and CUDA is the chip) is no
# faithful CUDA host, so it cannot be the reference there.
ALIAS_GAPS = {
    "choice.py": "torch.device('cuda').type stays 'cuda' under the alias, while tensors report the chip",
    "type_names.py": "x.type() names the emulated chip's tensor type, not torch.cuda.HalfTensor",
}


@pytest.mark.slow
@pytest.mark.parametrize("chip", CHIPS)
def test_the_cuda_alias_agrees_where_it_stands_for_a_cuda_host(trees: dict[str, Path], chip: str) -> None:
    """A second reference, run rather than written: the original programs under the CUDA alias on the chip
    print what the fixed programs print there (ON_CUDA), except where the alias is no CUDA host."""
    aliased = _run(trees["safe-original"], chip, alias=True)
    for name, run in aliased.items():
        assert run["status"] == "ok", (chip, name, run)
        agrees = _behaviour(run) == ("ok", ON_CUDA[name])
        assert agrees is (name not in ALIAS_GAPS), (chip, name, run["stdout"], ALIAS_GAPS.get(name))


@pytest.mark.slow
@pytest.mark.parametrize("chip", CHIPS)
def test_fixed_safe_forms_do_on_an_emulated_chip_what_cuda_did(trees: dict[str, Path], chip: str) -> None:
    host = _run(trees["safe-original"])
    plain = _run(trees["safe-original"], chip)  # the original on the chip: its CPU path
    fixed = _run(trees["safe-fixed"], chip)
    assert set(fixed) == set(ON_CUDA)
    for name, run in fixed.items():
        assert run["status"] == "ok", (chip, name, run)
        assert run["cuda_calls"] == [], (chip, name, run["cuda_calls"])
        assert _behaviour(run) == ("ok", ON_CUDA[name]), (chip, name, run["stdout"])
        assert plain[name]["status"] == "ok" and plain[name]["stdout"] == host[name]["stdout"], (chip, name)


@pytest.mark.slow
@pytest.mark.parametrize("chip", CHIPS)
def test_held_back_forms_run_on_an_emulated_chip_as_before(trees: dict[str, Path], chip: str) -> None:
    before, after = _run(trees["held-original"], chip), _run(trees["held-fixed"], chip)
    for name, run in before.items():
        assert run["status"] == "ok", (chip, name, run)
        assert after[name]["status"] == "ok" and after[name]["stdout"] == run["stdout"], (chip, name, after[name])
        # The code the fix left is the original's: no CUDA call is added (autocast_applied.py keeps its own).
        assert after[name]["cuda_calls"] == run["cuda_calls"], (chip, name, after[name]["cuda_calls"])
