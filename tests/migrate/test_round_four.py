"""Misses and noise of the fourth round (issue 37 item 2), each in a shape of our own."""

from __future__ import annotations

import pytest

pytest.importorskip("libcst")

from torch_fl.migrate.fix import fix_source
from torch_fl.migrate.scan import scan_source


def _found(source: str, path: str = "mod.py") -> list[tuple[str, int, str | None]]:
    return [(f.code, f.line, f.safety) for f in scan_source(source, path)]


def test_cuda_autocast_bound_to_a_name_and_entered_later_is_reported_without_a_fix() -> None:
    source = ("import torch\nfrom contextlib import nullcontext\n\n"
              "region = torch.cuda.amp.autocast if half else nullcontext\nplain = torch.cuda.amp.autocast\n\n"
              "def forward(net, batch):\n    with region():\n        return net(batch)\n")
    found = {f.line: f for f in scan_source(source)}
    assert found[4].code == found[5].code == "FL301" and found[4].safety is None
    assert "bound to `region` and entered later" in found[4].message
    assert fix_source(source).new_source == source  # `region()` may be nullcontext(): its calls are not rewritten


def test_cuda_visible_devices_in_a_child_environment_is_reported() -> None:
    source = ("import os\nimport subprocess\n\n"
              "subprocess.run(['python', 'worker.py'], env={**os.environ, 'CUDA_VISIBLE_DEVICES': '1'})\n"
              "child_env = os.environ.copy()\nchild_env['CUDA_VISIBLE_DEVICES'] = '2,3'\n"
              "subprocess.Popen(['python', 'worker.py'], env=child_env)\n")
    assert _found(source) == [("FL503", 4, None), ("FL503", 6, None)]


def test_a_vendor_collective_backend_is_hard_coded_too() -> None:
    source = ("import torch.distributed as dist\n\n"
              "def start(kind):\n    if kind == 'ascend':\n        dist.init_process_group(backend='hccl')\n"
              "    else:\n        dist.init_process_group('cncl')\n")
    findings = scan_source(source)
    assert [(f.code, f.safety) for f in findings] == [("FL501", "safe"), ("FL501", "safe")]
    assert "Hard-coded `hccl` process-group backend" in findings[0].message
    fixed = fix_source(source).new_source
    assert "init_process_group(backend=torch.fl.dist_backend())" in fixed
    assert "init_process_group(torch.fl.dist_backend())" in fixed
    # a table of backends per vendor is multi-vendor code, not a finding
    assert scan_source("BACKENDS = {'npu': 'hccl', 'mlu': 'cncl', 'xpu': 'xccl', 'cuda': 'nccl'}\n") == []


def test_a_scaler_with_star_arguments_has_no_fix_instead_of_a_fix_not_applied() -> None:
    source = ("import torch\n\ndef scaler(*args, **options):\n    first = torch.cuda.amp.GradScaler(*args)\n"
              "    return torch.cuda.amp.GradScaler(**options)\n")
    findings = scan_source(source)
    assert [(f.code, f.safety) for f in findings] == [("FL302", None), ("FL302", None)]
    assert "cannot be and-ed into `*args`/`**kwargs`" in findings[0].message
    result = fix_source(source)
    assert result.not_applied == [] and result.new_source == source


def test_a_runtime_call_is_not_half_fixed_around_an_unsafe_one() -> None:
    source = "import torch\n\ndef bind(rank):\n    torch.cuda.set_device(rank % torch.cuda.device_count())\n"
    found = {f.message.split("`")[1]: f for f in scan_source(source)}
    assert found["torch.cuda.set_device()"].safety == "unsafe"
    assert "its arguments hold a call whose fix is unsafe (FL201, line 4)" in found["torch.cuda.set_device()"].message
    assert fix_source(source).new_source == source  # safe fixes leave both
    unsafe = fix_source(source, unsafe=True).new_source
    assert "torch.fl.set_device(rank % torch.fl.device_count())" in unsafe
    # with a safe argument the call stays a safe fix
    assert _found("import torch\ntorch.cuda.set_device(rank % 8)\n") == [("FL201", 2, "safe")]


def test_a_cudnn_flag_read_for_a_log_line_is_not_a_finding_but_its_setting_is() -> None:
    source = ("import logging\nimport torch\n\nlogger = logging.getLogger(__name__)\n"
              "logger.info('deterministic=%s', torch.backends.cudnn.deterministic)\n"
              "print(f'benchmark: {torch.backends.cudnn.benchmark}')\ntorch.backends.cudnn.benchmark = True\n")
    assert _found(source) == [("FL401", 7, None)]


def test_deepspeed_host_optimizers_are_not_cuda_only() -> None:
    source = ("from deepspeed.ops.adam import DeepSpeedCPUAdam\nfrom deepspeed.ops.adam.cpu_adam import "
              "DeepSpeedCPUAdam as HostAdam\nfrom deepspeed.ops.lion import DeepSpeedCPULion\n")
    assert _found(source) == []
    assert _found("from deepspeed.ops.adam import DeepSpeedCPUAdam, FusedAdam\n") == [("FL801", 1, None)]


def test_a_chain_of_availability_checks_over_vendors_is_multi_vendor_code() -> None:
    elif_chain = ("import torch\n\ndef choose():\n    if torch.cuda.is_available():\n        name = 'cuda'\n"
                  "    elif hasattr(torch, 'npu') and torch.npu.is_available():\n        name = 'npu'\n"
                  "    elif torch.backends.mps.is_available():\n        name = 'mps'\n    else:\n        name = 'cpu'\n"
                  "    return torch.device(name)\n")
    returns = ("import torch\nfrom transformers.utils import is_torch_npu_available, is_torch_xpu_available\n\n"
               "def choose():\n    if torch.cuda.is_available():\n        return 'cuda'\n"
               "    if is_torch_npu_available():\n        return 'npu'\n    if is_torch_xpu_available():\n"
               "        return 'xpu'\n    return 'cpu'\n")
    for source in (elif_chain, returns):
        assert _found(source) == []
        assert fix_source(source, unsafe=True).new_source == source
    # a CUDA-only chain is still a check (and what it guards)
    single = "import torch\n\ndef choose():\n    if torch.cuda.is_available():\n        return 'cuda'\n    return 'cpu'\n"
    assert [code for code, _, _ in _found(single)] == ["FL201", "FL101"]


def test_conditional_and_accelerator_config_defaults() -> None:
    source = ("def configure(cfg, rank, gpus):\n"
              "    cfg.SOLVER.DEVICE = 'cuda:{}'.format(rank) if gpus > 0 else 'cpu'\n"
              "    cfg.EVAL.DEVICE = f'cuda:{rank}' if gpus else 'cpu'\n    return cfg\n\n\n"
              "class TrainerArgs:\n    accelerator: str = 'gpu'\n    devices: int = 1\n")
    found = {f.line: f for f in scan_source(source)}
    assert found[2].code == found[3].code == "FL107" and found[2].safety is None
    assert "set to the CUDA device `'cuda:{}'.format(rank)`" in found[2].message
    assert found[8].safety == "unsafe"
    assert "accelerator: str = 'auto'" in fix_source(source, unsafe=True).new_source


def test_an_accelerator_key_in_yaml_is_reported(tmp_path) -> None:
    from torch_fl.migrate.scan import scan_paths

    (tmp_path / "trainer.yaml").write_text("trainer:\n  accelerator: gpu\n  devices: 2\nnpu:\n  accelerator: gpu\n")
    findings = scan_paths([tmp_path]).findings
    assert [(f.code, f.line) for f in findings] == [("FL107", 2)]
    assert "Set it to `auto`" in findings[0].fix_title


def test_a_device_handed_to_the_projects_other_modules_or_to_a_class_here_is_followed() -> None:
    handed = ("from .loop import fit\n\nDEVICE_NAME = 'unused'\ndevice = 'cuda'\n\n"
              "def main(net):\n    fit(net, device)\n")
    assert _found(handed) == [("FL105", 4, "unsafe")]
    assert "device = torch.fl.device_type()" in fix_source(handed, unsafe=True).new_source
    built = ("import torch\n\n\nclass Worker:\n    def __init__(self, place, steps=1):\n"
             "        self.place = torch.device(place)\n\n\ndef spawn(rank):\n    return Worker(f'cuda:{rank}')\n")
    found = scan_source(built)
    assert [(f.code, f.line, f.safety) for f in found] == [("FL105", 10, None)]
    assert "reaches a device argument (line 6)" in found[0].message


@pytest.mark.skipif(__import__("sys").version_info >= (3, 12), reason="this Python parses 3.12 syntax itself")
def test_a_file_in_newer_python_syntax_is_named_as_such(tmp_path) -> None:
    from torch_fl.migrate.scan import scan_paths

    (tmp_path / "generic.py").write_text("type Pair = tuple[int, int]\n\ndef head[T](xs: list[T]) -> T:\n"
                                         "    return xs[0]\n")
    (tmp_path / "broken.py").write_text("def f(:\n")
    errors = {e.path.rsplit("/", 1)[-1]: e.message for e in scan_paths([tmp_path]).errors}
    version = "{}.{}".format(*__import__("sys").version_info[:2])
    assert f"valid Python 3.12 that this Python ({version}) cannot parse" in errors["generic.py"]
    assert "scan it with Python >= 3.12" in errors["generic.py"]
    assert errors["broken.py"].startswith("SyntaxError: ")


def test_a_per_vendor_table_built_with_dict_keywords_is_multi_vendor_code() -> None:
    source = ("import torch\n\nALLOCATED = dict(cuda=torch.cuda.memory_allocated, xpu=torch.xpu.memory_allocated,\n"
              "                 mps=torch.mps.current_allocated_memory)\n")
    assert _found(source) == []
    assert _found("import torch\nSTATS = dict(cuda=torch.cuda.memory_allocated)\n") != []


def test_a_guarded_device_handed_to_a_callee_that_is_not_torchs_makes_the_check_unsafe() -> None:
    # The callee (the project's own step class) decides what the name means; a test under the check then
    # asserts what it decided for CUDA (non_blocking only for "cuda"): on an NPU the rewritten check would
    # run that assertion with "npu", where the original skipped it.
    source = ("import torch\nfrom mylib.steps import MoveStep\n\n\ndef test_non_blocking():\n"
              "    if torch.cuda.is_available():\n        step = MoveStep(device='cuda')\n"
              "        assert step.non_blocking is True\n")
    check = next(f for f in scan_source(source) if f.line == 6)
    assert check.safety == "unsafe" and "a callee that is not torch's" in check.message
    assert "if torch.cuda.is_available():" in fix_source(source).new_source
    # torch's own callee takes any accelerator's name: the check stays a safe fix
    own = "import torch\nif torch.cuda.is_available():\n    x = torch.zeros(1, device='cuda')\n"
    assert [(f.code, f.safety) for f in scan_source(own)] == [("FL201", "safe"), ("FL101", "safe")]


def test_ordinals_a_check_picks_directly_hold_it_back() -> None:
    # fork_rng(devices=...) takes CUDA ordinals unless given a device type: with the check rewritten alone,
    # an NPU host would fork CUDA's generators for [0] where the original forked none.
    source = ("import torch\n\ndevices = [torch.cuda.current_device()] if torch.cuda.is_available() else []\n"
              "with torch.random.fork_rng(devices=devices):\n    torch.manual_seed(0)\n"
              "workers = 8 if torch.cuda.is_available() else 2\n")
    checks = {f.line: f for f in scan_source(source) if "is_available" in f.message}
    assert checks[3].safety is None and "the device ordinal `devices`" in checks[3].message
    assert checks[6].safety == "safe"  # a worker count is no ordinal
