"""The vendor's own CPU fallback (ops.vendor_fallback): torch_npu's npu_cpu_fallback and torch_mlu's
mlu_fallback run an op they have no kernel for on the CPU; torch-xpu-ops does so for its list only, or
for every op under PYTORCH_ENABLE_XPU_FALLBACK=1. The route table gives such ops the route fallback (not
translate, not unsupported), the emulated chip computes them on the host with a FallbackWarning and counts
them, and the vendor's switch turns them back into clear errors. description/fallback.py."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import warnings
from pathlib import Path

import pytest
import torch

import torch_fl
from torch_fl.description.fallback import parse_switch, vendor_fallback
from torch_fl.description.loader import parse
from torch_fl.errors import DescriptionError, FallbackWarning, UnsupportedOperatorError
from torch_fl.routing import RouteTable

REPO = Path(__file__).resolve().parents[2]
NPU_SAYS = ("CAUTION: The operator 'aten::cholesky_inverse' is not currently supported on the NPU backend and "
            "will fall back to run on the CPU. This may have performance implications. (function npu_cpu_fallback)")
CHOLESKY_INVERSE = "aten::cholesky_inverse.default"


def _route(chip: str, op: str, dtype: str | None = "float32"):
    return RouteTable(torch_fl.description(chip)).route(op, dtype)


# The route table --------------------------------------------------------------------------------------
def test_an_op_the_npu_table_lacks_is_the_vendors_fallback():
    route = _route("npu", CHOLESKY_INVERSE)
    assert route.kind == "fallback" and route.vendor
    assert "ops.vendor_fallback = 'cpu': torch_npu has no kernel for it and runs it on the CPU itself" in route.source
    assert f'(the vendor\'s CPU fallback: "{NPU_SAYS}")' in route.source
    # the op the public logs show for torch.linalg.lstsq
    assert _route("npu", "aten::linalg_lstsq.out").kind == "fallback"


def test_a_decomposition_does_not_beat_the_vendors_fallback():
    # cambricon registers no bucketize.Tensor; PyTorch has a decomposition, but the real stack never runs
    # it: the op reaches torch_mlu's fallback
    assert _route("mlu", "aten::bucketize.Tensor", "int64").kind == "fallback"
    with pytest.MonkeyPatch.context() as env:
        env.setenv("ENABLE_FALLBACK_TO_CPU", "0")
        assert _route("mlu", "aten::bucketize.Tensor", "int64").kind == "translate"  # torch-fl's own answer


def test_composite_ops_are_not_fallbacks():
    # CompositeImplicitAutograd decomposes above the backend; CompositeExplicitAutograd runs its kernel
    assert _route("npu", "aten::linalg_cholesky.default").kind == "native"
    assert _route("npu", "aten::linalg_lstsq.default").kind == "native"
    # a *_copy view op (and nn.Bilinear's _trilinear) has a NonFunctional composite that PyTorch runs on
    # the device: native, as on the real chip (a structured op's NonFunctional forwarder is not: below)
    assert _route("npu", "aten::view_copy.default").kind == "native"
    assert _route("npu", "aten::_trilinear.default").kind == "native"


def test_a_structured_op_falls_back_through_its_out_overload():
    # torch_npu 2.5 registers no bitwise_left_shift.Tensor_out: the functional op's generated forwarder
    # calls it, and that is what the vendor's fallback runs
    desc = torch_fl.description("npu").with_plugin_version("2.5")
    route = RouteTable(desc).route("aten::bitwise_left_shift.Tensor", "int64")
    assert route.kind == "fallback" and "through aten::bitwise_left_shift.Tensor_out" in route.source
    assert "The operator 'aten::bitwise_left_shift.Tensor_out' is not currently supported" in route.source


def test_an_op_without_a_cpu_kernel_stays_a_clear_error():
    # the vendor's fallback runs the CPU kernel, and cuDNN's RNN has none: no route on the chip
    route = _route("npu", "aten::_cudnn_rnn.default")
    assert route.kind == "unsupported" and "vendor" not in route.source


@pytest.mark.parametrize(("chip", "env", "value"), [
    ("npu", "TORCH_NPU_FALLBACK_CPU_DISABLE", "1"), ("mlu", "ENABLE_FALLBACK_TO_CPU", "0"),
    ("mlu", "ENABLE_FALLBACK_TO_CPU", "off")])
def test_the_vendors_switch_turns_it_off(monkeypatch, chip, env, value):
    monkeypatch.setenv(env, value)
    route = _route(chip, CHOLESKY_INVERSE)
    assert route.kind == "unsupported"
    assert f"the vendor's CPU fallback is off (ops.vendor_fallback = 'cpu', flipped by {env}=" in route.source


def test_the_switch_set_to_its_default_changes_nothing(monkeypatch):
    monkeypatch.setenv("TORCH_NPU_FALLBACK_CPU_DISABLE", "0")
    monkeypatch.setenv("ENABLE_FALLBACK_TO_CPU", "1")
    assert _route("npu", CHOLESKY_INVERSE).kind == _route("mlu", CHOLESKY_INVERSE).kind == "fallback"


def test_xpu_falls_back_for_its_list_and_everything_under_its_switch(monkeypatch):
    listed = _route("xpu", "aten::_cholesky_solve_helper.default")  # XPUFallback.cpp's list (tables/xpu.txt)
    assert listed.kind == "fallback" and listed.vendor and "the vendor's CPU-fallback list" in listed.source
    # neither registered nor listed (cholesky is listed in torch-xpu-ops release/2.13, the table's branch)
    assert _route("xpu", "aten::linalg_ldl_factor_ex.default").kind == "unsupported"
    monkeypatch.setenv("PYTORCH_ENABLE_XPU_FALLBACK", "1")
    route = _route("xpu", "aten::linalg_ldl_factor_ex.default")
    assert route.kind == "fallback" and route.vendor
    assert "ops.vendor_fallback = 'error', flipped by PYTORCH_ENABLE_XPU_FALLBACK=1 in the environment" in route.source
    assert "the xpu backend has no kernel for it" in route.source


def test_chips_without_a_vendor_fallback_keep_their_policy():
    assert not vendor_fallback(torch_fl.description("cuda")).on
    assert _route("minimal", "aten::_addmm_activation.default").kind == "translate"


def test_the_route_table_is_rebuilt_when_the_switch_changes(monkeypatch):
    from torch_fl.routing import activation

    desc = torch_fl.description("npu")
    assert activation.table_for(desc).route(CHOLESKY_INVERSE, "float32").kind == "fallback"
    monkeypatch.setenv("TORCH_NPU_FALLBACK_CPU_DISABLE", "1")
    assert activation.table_for(desc).route(CHOLESKY_INVERSE, "float32").kind == "unsupported"


# The description keys ---------------------------------------------------------------------------------
CHIP = 'schema = 1\nname = "chip"\ndevice_type = "chip"\ndispatch_key = "PrivateUse1"\n[ops]\nnative = []\n'


def test_bad_values_name_the_file_key_and_allowed_values():
    with pytest.raises(DescriptionError, match=r"chip.toml:\d+: \[ops.vendor_fallback\] 'cpus' is not allowed; "
                                               r"allowed values: error, cpu\. Did you mean 'cpu'\?"):
        parse(CHIP + 'vendor_fallback = "cpus"\n', "chip.toml")
    with pytest.raises(DescriptionError, match=r"\[ops.vendor_fallback_env\] 'ENABLE_FALLBACK_TO_CPU' is not NAME=VALUE"):
        parse(CHIP + 'vendor_fallback_env = "ENABLE_FALLBACK_TO_CPU"\n', "chip.toml")
    with pytest.raises(DescriptionError, match=r"\[ops.vendor_fallback_env\] 'X=maybe' is not NAME=VALUE"):
        parse(CHIP + 'vendor_fallback_env = "X=maybe"\n', "chip.toml")
    assert parse_switch("ENABLE_FALLBACK_TO_CPU=off") == ("ENABLE_FALLBACK_TO_CPU", False)
    assert parse_switch("PYTORCH_ENABLE_XPU_FALLBACK=1") == ("PYTORCH_ENABLE_XPU_FALLBACK", True)


def test_a_users_chip_with_a_vendor_fallback(monkeypatch):
    desc = parse(CHIP + 'vendor_fallback = "cpu"\nvendor_fallback_env = "CHIP_NO_FALLBACK=yes"\n'
                 'vendor_fallback_message = "chip: {op} runs on the host"\n', "chip.toml")
    route = RouteTable(desc).route("aten::mm.default", "float32")
    # mm's generated forwarder calls mm.out, which is what reaches the backend's fallback
    assert route.kind == "fallback" and '"chip: aten::mm.out runs on the host"' in route.source
    monkeypatch.setenv("CHIP_NO_FALLBACK", "1")
    assert RouteTable(desc).route("aten::mm.default", "float32").kind == "unsupported"


# The emulated chip ------------------------------------------------------------------------------------
def _spd() -> torch.Tensor:
    x = torch.randn(4, 4, generator=torch.Generator().manual_seed(0))
    return x @ x.T + 4 * torch.eye(4)


def test_emulated_npu_computes_it_on_the_host_warns_once_and_counts():
    a = _spd()
    expected = torch.cholesky_inverse(a)
    torch_fl.reset_route_stats()
    with torch_fl.emulate("npu") as chip, warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        d = a.to(chip.device)
        first, second = torch.cholesky_inverse(d), torch.cholesky_inverse(d)
        assert first.device == chip.device
        assert torch.equal(first.cpu(), expected) and torch.equal(second.cpu(), expected)
        records = [r for r in torch_fl.route_stats() if r["op"] == CHOLESKY_INVERSE]
    said = [str(w.message) for w in caught if issubclass(w.category, FallbackWarning)]
    assert len([s for s in said if CHOLESKY_INVERSE in s]) == 1, said
    (text,) = [s for s in said if CHOLESKY_INVERSE in s]
    assert text.startswith(f"torch-fl: {CHOLESKY_INVERSE} [float32] runs on the CPU (fallback) on emu:npu")
    assert "torch_npu has no kernel for it and runs it on the CPU itself" in text and NPU_SAYS in text
    assert "on the chip every call copies its tensors to the host and back" in text
    assert [(r["route"], r["calls"]) for r in records] == [("fallback", 2)]


def test_emulated_npu_a_composite_implicit_op_still_decomposes():
    a = _spd()
    torch_fl.reset_route_stats()
    with torch_fl.emulate("npu") as chip, warnings.catch_warnings():
        warnings.simplefilter("ignore", FallbackWarning)
        got = torch.linalg.cholesky(a.to(chip.device))  # CompositeImplicitAutograd: -> linalg_cholesky_ex
        routed = {r["op"]: r["route"] for r in torch_fl.route_stats()}
    torch.testing.assert_close(got.cpu(), torch.linalg.cholesky(a))
    assert routed.get("aten::linalg_cholesky_ex.default") == "fallback"
    assert "aten::linalg_cholesky.default" not in routed


def test_emulated_npu_with_the_switch_off_is_the_clear_error(monkeypatch):
    monkeypatch.setenv("TORCH_NPU_FALLBACK_CPU_DISABLE", "1")
    with torch_fl.emulate("npu") as chip, pytest.raises(UnsupportedOperatorError) as raised:
        torch.cholesky_inverse(_spd().to(chip.device))
    text = str(raised.value)
    assert text.startswith(f"{CHOLESKY_INVERSE} is not supported on emu:")
    assert "flipped by TORCH_NPU_FALLBACK_CPU_DISABLE=1 in the environment" in text
    assert "let the vendor's stack run it on the CPU: unset TORCH_NPU_FALLBACK_CPU_DISABLE" in text


CHILD = r'''
import json, warnings, torch, torch_fl
x = torch.randn(4, 4); a = x @ x.T + 4 * torch.eye(4)
out = {"device": str(torch.fl.device())}
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    try:
        y = torch.cholesky_inverse(a.npu())
        out["equal"] = torch.equal(y.cpu(), torch.cholesky_inverse(a))
        out["stats"] = [r for r in torch.fl.route_stats() if r["op"] == "aten::cholesky_inverse.default"]
    except NotImplementedError as exc:
        out["error"] = str(exc).splitlines()[0]
out["warned"] = [str(w.message) for w in caught if w.category.__name__ == "FallbackWarning"]
print(json.dumps(out))
'''


@pytest.mark.slow  # two fresh processes: ~10 s
def test_under_its_own_name_in_a_fresh_process():
    def run(**env: str) -> dict:
        done = subprocess.run([sys.executable, "-c", CHILD], capture_output=True, text=True, timeout=300,
                              env={**os.environ, "FL_DEVICE": "emu:npu", **env}, cwd=REPO, check=False)
        assert done.returncode == 0, done.stderr[-3000:]
        return json.loads(done.stdout.strip().splitlines()[-1])

    on = run()
    assert on["device"] == "npu:0" and on["equal"]
    assert [(r["route"], r["calls"]) for r in on["stats"]] == [("fallback", 1)]
    (warned,) = on["warned"]
    assert warned.startswith("torch-fl: aten::cholesky_inverse.default [float32] runs on the CPU (fallback) on "
                             "emu:npu (npu:0): ")
    assert NPU_SAYS in warned
    off = run(TORCH_NPU_FALLBACK_CPU_DISABLE="1")
    assert off["error"] == "aten::cholesky_inverse.default is not supported on emu:npu (npu:0) (description 'npu')."
    assert off["warned"] == []
