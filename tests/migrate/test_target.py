"""A fix is safe only if it keeps the meaning on the host AND is right on the target (issue 21).

Every program in fixtures/target/ (our own code, in the shapes of public repositories: yolov5's
select_device, ChatGLM-6B's cache cleanup, alpaca-lora's device choice, dinov2's nested autocast, a
CUDA-only onnxruntime provider...) runs before and after `torchfl fix` on the CPU host, where the
output must be the same, and after the fix on emulated chips (FL_DEVICE=emu:mps, emu:npu), where it
must run and its own code must call no CUDA-only function (target_runner.py watches the calls).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("libcst")

from torch_fl.migrate.fix import fix_paths, fix_source
from torch_fl.migrate.scan import scan_source

HERE = Path(__file__).parent
PROGRAMS = sorted((HERE / "fixtures" / "target").glob("*.py"))
CHIPS = ("emu:mps", "emu:npu")
# What an unsafe fix is allowed to change, and why it is unsafe: torch.fl.device("acc1") raises on a
# one-device host where torch.device("cuda:1") only built an object.
UNSAFE_RAISES = {"device_objects.py": "DeviceNotFoundError"}
# What a chip itself cannot do, whatever the fix (its description says so): MPS has no float64.
CHIP_LIMITS = {("emu:mps", "float64_meter.py"): "it produces float64, which is not in precision.dtypes"}


def _run(folder: Path, device: str | None) -> dict[str, dict]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("FL_")}
    env["CUDA_VISIBLE_DEVICES"] = ""
    if device:
        env["FL_DEVICE"] = device
    programs = sorted(str(p) for p in folder.glob("*.py"))
    proc = subprocess.run([sys.executable, str(HERE / "target_runner.py"), *programs], env=env, cwd=folder,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    results = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    return {r["path"]: r for r in results}


@pytest.fixture(scope="module")
def original_runs(tmp_path_factory) -> dict[str, dict]:
    """The programs as written, on the CPU host (shared by the safe and the unsafe run)."""
    folder = tmp_path_factory.mktemp("original")
    for program in PROGRAMS:
        shutil.copy(program, folder / program.name)
    return _run(folder, None)


@pytest.mark.slow
@pytest.mark.parametrize("unsafe", [False, True], ids=["safe", "unsafe"])
def test_fixed_programs_keep_the_host_and_take_no_cuda_path_on_emulated_chips(tmp_path, unsafe, original_runs):
    fixed = tmp_path / "fixed"
    fixed.mkdir()
    for program in PROGRAMS:
        shutil.copy(program, fixed / program.name)
    report = fix_paths([fixed], unsafe=unsafe)
    assert report.errors == [] and report.applied > 0
    before, after = original_runs, _run(fixed, None)
    assert set(before) == {p.name for p in PROGRAMS}
    needs_cuda = {p.name for p in PROGRAMS if "# host: cuda" in p.read_text()}
    for name, run in before.items():
        if name in needs_cuda:
            # Written for a CUDA host: the original stops on the CPU; the fixed code must run there.
            assert "Torch not compiled with CUDA enabled" in run["status"], (name, run)
        else:
            assert run["status"] == "ok", (name, run)
        if unsafe and name in UNSAFE_RAISES:
            assert UNSAFE_RAISES[name] in after[name]["status"], after[name]
            continue
        if not unsafe and name not in needs_cuda:  # safe fixes: the same output on the host the code ran on
            assert after[name]["stdout"] == run["stdout"], (name, run["stdout"], after[name]["stdout"])
        assert after[name]["status"] == "ok", (name, after[name])
    # Unsafe fixes differ from safe ones only in what they may change on the host: one chip suffices.
    for chip in CHIPS[1:] if unsafe else CHIPS:
        for name, run in _run(fixed, chip).items():
            if unsafe and name in UNSAFE_RAISES:
                assert UNSAFE_RAISES[name] in run["status"], run
                continue
            if (chip, name) in CHIP_LIMITS:
                assert CHIP_LIMITS[chip, name] in run["status"], run
                continue
            assert run["status"] == "ok", (chip, name, run)
            assert run["cuda_calls"] == [], (chip, name, run["cuda_calls"])


def _fixable(source: str) -> list[tuple[str, int]]:
    return [(f.code, f.line) for f in scan_source(source) if f.fixable]


def test_a_guard_around_cuda_only_code_is_not_rewritten_alone():
    source = (PROGRAMS[0].parent / "select_device.py").read_text()
    findings = {f.line: f for f in scan_source(source)}
    guard = next(f for f in findings.values() if f.code == "FL201" and "is_available" in f.message)
    assert guard.safety is None and not guard.fixable
    assert "not fixed: it guards CUDA-only code that has no automatic fix (FL201, line 17)" in guard.message
    assert "if not cpu and torch.cuda.is_available():" in fix_source(source, unsafe=True).new_source


def test_a_guard_is_fixed_with_its_body_when_the_body_is_fixable():
    source = ("import torch\nx = torch.ones(2)\nif torch.cuda.is_available():\n"
              "    torch.backends.cudnn.benchmark = True\n    x = x.cuda()\n")
    fixed = fix_source(source).new_source
    assert "if torch.fl.is_accelerator():" in fixed and "x.to(torch.fl.device())" in fixed


def test_a_guard_around_an_unsafe_fix_is_unsafe_and_fixed_together():
    source = ("import torch\nif torch.cuda.is_available():\n    device = 'cuda'\nelse:\n    device = 'cpu'\n"
              "model.to(device)\n")
    guard = next(f for f in scan_source(source) if f.code == "FL201")
    assert guard.safety == "unsafe" and "(FL105, line 3)" in guard.message
    assert "torch.cuda.is_available()" in fix_source(source).new_source
    unsafe = fix_source(source, unsafe=True).new_source
    assert "if torch.fl.is_accelerator():\n    device = torch.fl.device_type()" in unsafe


def test_a_guard_around_a_call_into_another_project_module_is_not_a_safe_fix():
    # guided-diffusion: `from . import dist_util`; DDP(device_ids=[dist_util.dev()]) under the check, where
    # dev() (another file) returns a CUDA device only while CUDA is there: the check rewritten alone would
    # run DDP with a CPU device id on an NPU host. The pass cannot see that body, so the fix is unsafe.
    source = ("import torch as th\nfrom torch.nn.parallel import DistributedDataParallel as DDP\n"
              "from . import dist_util\nfrom .logger import log\n\n"
              "def wrap(model):\n    if th.cuda.is_available():\n"
              "        return DDP(model, device_ids=[dist_util.dev()])\n    return model\n\n"
              "def note():\n    if th.cuda.is_available():\n        log('on cuda')\n")
    guards = {f.line: f for f in scan_source(source) if f.code == "FL201"}
    assert guards[7].safety == "unsafe" and not guards[7].fixable
    assert "(dist_util.dev(), defined in another module of this project and not followed here, line 8)" \
        in guards[7].message
    assert guards[12].safety == "unsafe"  # `from .logger import log`: log() is the project's too
    assert "th.cuda.is_available()" in fix_source(source).new_source
    assert "th.cuda.is_available()" not in fix_source(source, unsafe=True).new_source
    # a call into an installed package (an absolute import) is not the project's: the fix stays safe
    outside = "import torch\nimport math\nif torch.cuda.is_available():\n    print(math.sqrt(2))\n"
    assert _fixable(outside) == [("FL201", 3)]


def test_an_early_return_guard_covers_the_rest_of_the_function():
    tuning = ("import torch\ndef setup():\n    if not torch.cuda.is_available():\n        return\n"
              "    torch.backends.cudnn.benchmark = True\n    torch.backends.cuda.matmul.allow_tf32 = True\n")
    assert scan_source(tuning) == []  # correctly guarded CUDA tuning
    props = ("import torch\ndef info():\n    if not torch.cuda.is_available():\n        return None\n"
             "    return torch.cuda.get_device_properties(0).name\n")
    assert _fixable(props) == []


def test_a_variable_holding_the_check_is_a_guard_too():
    source = ("import torch\nuse_cuda = torch.cuda.is_available()\nif use_cuda:\n"
              "    print(torch.cuda.get_device_name(0), torch.cuda.get_device_capability())\n")
    check = next(f for f in scan_source(source) if f.line == 2)
    assert check.safety is None and "not fixed" in check.message


def test_checks_that_pick_cuda_only_packages_are_left_alone():
    source = (PROGRAMS[0].parent / "onnx_providers.py").read_text()
    assert scan_source(source) == []
    source = ("import torch\ncuda = torch.cuda.is_available()\n"
              "providers = ['CUDAExecutionProvider', 'CPUExecutionProvider'] if cuda else ['CPUExecutionProvider']\n")
    assert scan_source(source) == []


def test_nested_autocast_stays_scoped_to_its_device():
    fixed = fix_source("import torch\nwith torch.cuda.amp.autocast(enabled=False):\n    y = x @ x\n").new_source
    assert ("with torch.autocast(torch.fl.device_type(), enabled=False) if torch.fl.is_accelerator() "
            "else contextlib.nullcontext():") in fixed
    assert "import contextlib\n" in fixed
    assert scan_source(fixed) == []  # idempotent
    decorated = "import torch\n@torch.cuda.amp.autocast(enabled=False)\ndef f(x):\n    return x\n"
    assert [(f.code, f.safety) for f in scan_source(decorated)] == [("FL301", "unsafe")]


def test_a_cuda_device_object_with_an_index_is_an_unsafe_fix():
    findings = scan_source('import torch\na = torch.device("cuda:0")\nb = torch.device("cuda:1")\n'
                           'c = torch.device("cuda", 2)\nd = torch.device(1)\n')
    assert [(f.line, f.safety) for f in findings] == [(2, "safe"), (3, "unsafe"), (4, "unsafe"), (5, "unsafe")]


def test_a_conditional_expression_is_a_guard_too():
    source = "import torch\nmem = torch.cuda.memory_reserved() if torch.cuda.is_available() else 0\n"
    check = next(f for f in scan_source(source) if "is_available" in f.message)
    assert check.safety == "unsafe" and "guards code whose fix is unsafe" in check.message
    props = "import torch\nname = torch.cuda.get_device_name(0) if torch.cuda.is_available() else 'cpu'\n"
    assert [f.code for f in scan_source(props) if f.fixable] == []
