"""Fixes that keep types and guards (issue 30, items 1-3), as behaviour: each snippet runs before and
after `torchfl fix` on this CPU host, and on a CUDA host simulated by patching the availability calls
(the snippets only compute strings and choices, so no kernel runs), and the results must be equal; on an
emulated NPU (FL_DEVICE=emu:npu) the fixed code must name no CUDA device.

1. A string device stays a string where the value may be used as one (f-strings, string methods,
   split, table keys, unknown callees, lookup defaults); a table key makes the fix unsafe.
2. A "cuda" literal only reachable under a CUDA check is fixed with it; set_device with a CUDA device
   gets the ordinal; a test's skip flag is left alone.
3. Multi-vendor code (device-type tables, dispatch on device.type, getattr(torch, device.type), the
   accelerator API) is not a finding.
"""

from __future__ import annotations

import types
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("libcst")

import torch

import torch_fl  # noqa: F401  (installs torch.fl)
from torch_fl.migrate.fix import fix_source
from torch_fl.migrate.scan import scan_source

SNIPPET = '''\
import torch


def devices():
    return ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])


def devices_nested():
    if torch.cuda.is_available():
        names = ["cuda"]
        names.append("cuda:0")
        return names
    return []


def tagged():
    dev = "cuda" if torch.cuda.is_available() else "cpu"
    return f"run-{dev}.log", dev.upper(), dev.split(":")[0]


def parse_device(device):
    kind, _, index = device.partition(":")
    return kind, index


def from_args(args, x):
    device = getattr(args, "device", "cuda")
    kind, _ = parse_device(device)
    return kind, (x.to(device).device.type if kind == "cpu" else None)


def handed_on(fn):
    return fn(device="cuda" if torch.cuda.is_available() else "cpu")


def chosen_moves(x):
    return x.to("cuda" if torch.cuda.is_available() else "cpu").device.type


def pick(i, calls):
    if torch.cuda.is_available():
        torch.cuda.set_device(torch.device("cuda", i))
        torch.cuda.set_device(f"cuda:{i}")
        torch.cuda.synchronize(torch.device("cuda"))
    return calls
'''


def _load(source: str, name: str) -> types.ModuleType:
    module = types.ModuleType(name)
    exec(compile(source, name, "exec"), module.__dict__)
    return module


@contextmanager
def _cuda_host(calls: list[Any]):
    """A CUDA host as these snippets see it: torch.cuda and torch.fl say an accelerator is there and it
    is CUDA; set_device/synchronize record their arguments."""
    patches = {
        (torch.cuda, "is_available"): lambda: True,
        (torch.fl, "is_accelerator"): lambda device=None: True,
        (torch.fl, "device_type"): lambda device=None: "cuda",
        (torch.fl, "device"): lambda d=None: torch.device("cuda", int(str(d).removeprefix("acc")) if d else 0),
        (torch.cuda, "set_device"): lambda d: calls.append(("set", d)),
        (torch.fl, "set_device"): lambda d=None: calls.append(("set", d)),
        (torch.cuda, "synchronize"): lambda d=None: calls.append(("sync", d)),
        (torch.fl, "synchronize"): lambda d=None: calls.append(("sync", d)),
    }
    saved = {key: getattr(*key) for key in patches}
    try:
        for (owner, name), value in patches.items():
            setattr(owner, name, value)
        yield
    finally:
        for (owner, name), value in saved.items():
            setattr(owner, name, value)


def _results(module: types.ModuleType, calls: list[Any]) -> dict[str, Any]:
    return {
        "devices": module.devices(),
        "devices_nested": module.devices_nested(),
        "tagged": module.tagged(),
        "handed_on": module.handed_on(lambda device: (type(device).__name__, device)),
        "from_args": module.from_args(types.SimpleNamespace(device="cpu"), torch.zeros(1)),
        "pick": len(module.pick(1, calls)),
    }


@pytest.fixture(scope="module")
def fixed() -> dict[str, str]:
    return {"safe": fix_source(SNIPPET).new_source, "unsafe": fix_source(SNIPPET, unsafe=True).new_source}


def test_fixes_keep_types_and_guards(fixed: dict[str, str]) -> None:
    safe = fixed["safe"]
    assert 'return ["cpu"] + ([torch.fl.device_type()] if torch.fl.is_accelerator() else [])' in safe
    assert 'names = [torch.fl.device_type()]' in safe and 'names.append(str(torch.fl.device("acc0")))' in safe
    assert "dev = torch.fl.device_type()" in safe  # used in an f-string, .upper(), .split()
    assert 'fn(device=torch.fl.device_type())' in safe  # a callee that is not torch's
    assert 'x.to(torch.fl.device())' in safe  # torch's own: a device is fine
    assert "torch.fl.set_device(i)\n" in safe and safe.count("torch.fl.set_device(i)") == 2
    assert "torch.fl.synchronize()" in safe
    assert '"cuda"' not in safe.split("def parse_device")[0]  # nothing CUDA left before it
    # getattr(args, "device", "cuda") -> a string default, which parse_device can partition.
    assert 'getattr(args, "device", torch.fl.device_type())' in fixed["unsafe"]


@pytest.mark.parametrize("mode", ["safe", "unsafe"])
def test_fixed_code_behaves_the_same_on_the_cpu_and_on_cuda(fixed: dict[str, str], mode: str) -> None:
    before, after = _load(SNIPPET, "before"), _load(fixed[mode], "after")
    assert _results(after, []) == _results(before, [])  # this CPU host
    cuda_before: list[Any] = []
    cuda_after: list[Any] = []
    with _cuda_host(cuda_before):
        want = _results(before, cuda_before)
    with _cuda_host(cuda_after):
        got = _results(after, cuda_after)
    assert got == want
    assert want["devices"] == ["cpu", "cuda"] and want["tagged"] == ("run-cuda.log", "CUDA", "cuda")
    with _cuda_host([]):  # the lookup's default: "cuda" on CUDA, a string either way (parse_device splits it)
        assert before.from_args(types.SimpleNamespace(), None) == after.from_args(types.SimpleNamespace(), None)
    if mode == "unsafe":
        assert after.from_args(types.SimpleNamespace(), torch.zeros(1)) == ("cpu", "cpu")  # was "cuda" here
    # set_device got the CUDA device before and its ordinal after (accN is cuda:N on a CUDA host).
    assert cuda_before == [("set", torch.device("cuda", 1)), ("set", "cuda:1"), ("sync", torch.device("cuda"))]
    assert cuda_after == [("set", 1), ("set", 1), ("sync", None)]


def test_fixed_code_names_no_cuda_device_on_an_emulated_npu(fixed: dict[str, str], tmp_path: Path,
                                                            run_as_user) -> None:
    script = tmp_path / "fixed.py"
    script.write_text(fixed["safe"] + (
        "\nimport types\n"
        "print(devices(), devices_nested(), tagged(), handed_on(lambda device: device))\n"
        "print(from_args(types.SimpleNamespace(device='cpu'), torch.zeros(1))[0])\n"))
    stdout = run_as_user(script, fl_device="emu:npu")
    assert "cuda" not in stdout
    assert stdout.splitlines()[0] == (
        "['cpu', 'npu'] ['npu', 'npu:0'] ('run-npu.log', 'NPU', 'npu') npu")


def test_a_table_indexed_by_the_chosen_device_makes_the_fix_unsafe() -> None:
    source = ("import torch\ndev = 'cuda' if torch.cuda.is_available() else 'cpu'\n"
              "batch = {'cuda': 64, 'cpu': 8}[dev]\n")
    [finding] = scan_source(source)
    assert finding.code == "FL901" and finding.safety == "unsafe"
    assert "indexes a table (line 3)" in finding.message
    assert fix_source(source).new_source == source


def test_a_literal_used_as_a_table_key_under_the_check_blocks_the_fix() -> None:
    source = "import torch\nif torch.cuda.is_available():\n    size = SIZES['cuda']\n"
    [finding] = scan_source(source)
    assert finding.code == "FL201" and finding.safety is None
    assert 'the table key "cuda", line 3' in finding.message


def test_set_device_with_a_device_variable_is_unsafe_with_the_reason() -> None:
    source = "import torch\ndev = torch.device('cuda', rank)\ntorch.cuda.set_device(dev)\ntorch.cuda.set_device(rank)\n"
    found = {f.line: f for f in scan_source(source) if f.code == "FL201"}
    assert found[3].safety == "unsafe" and "`dev` may be a CUDA device" in found[3].message
    assert found[4].safety == "safe"
    assert "torch.fl.set_device(rank)" in fix_source(source).new_source


SKIP_FLAGS = '''\
import unittest

import pytest
import torch

cuda_available = torch.cuda.is_available()
HAS_CUDA = torch.cuda.is_available()
requires_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")


class TestKernels(unittest.TestCase):
    @unittest.skipIf(not cuda_available, "CUDA only")
    def test_kernel(self):
        x = torch.zeros(1).cuda()


@pytest.mark.skipif(not HAS_CUDA, reason="CUDA only")
def test_other():
    y = torch.zeros(1).cuda()


def test_skips_inside():
    if not cuda_available:
        pytest.skip("CUDA only")
    z = torch.zeros(1).cuda()
'''


def test_test_skip_flags_and_what_they_guard_are_left_alone() -> None:
    assert scan_source(SKIP_FLAGS, "test_kernels.py") == []
    assert fix_source(SKIP_FLAGS, unsafe=True).new_source == SKIP_FLAGS
    # On an NPU the flag stays False, so the CUDA-only tests keep skipping.
    module = _load(SKIP_FLAGS, "test_kernels")
    assert module.cuda_available is False and module.HAS_CUDA is False


MULTI_VENDOR = '''\
import torch


def pin(device, x):
    if device.type in ["cuda", "npu", "xpu", "hpu"]:
        x = x.pin_memory()
    return x


def sync(device):
    getattr(torch, device.type).synchronize()
    if device.type == "cuda":
        torch.cuda.synchronize()
    elif device.type == "npu":
        torch.npu.synchronize()
    match device.type:
        case "cuda":
            torch.cuda.empty_cache()
        case "xpu" | "npu":
            pass
    if torch.accelerator.is_available():
        torch.accelerator.synchronize()


AVAILABLE = {
    "cuda": torch.cuda.is_available(),
    "npu": hasattr(torch, "npu") and torch.npu.is_available(),
    "mps": torch.backends.mps.is_available(),
}


def best():
    return next((name for name in ("cuda", "npu", "mps") if AVAILABLE[name]), "cpu")
'''


def test_multi_vendor_code_is_not_a_finding() -> None:
    assert scan_source(MULTI_VENDOR) == []
    assert fix_source(MULTI_VENDOR, unsafe=True).new_source == MULTI_VENDOR
    # The table still says "cpu" on this host and would say "npu" on an NPU, not "cuda".
    assert _load(MULTI_VENDOR, "mv").best() == "cpu"
