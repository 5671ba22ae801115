"""The emulated chip says it is the chip it emulates: the vendor's own name and SoC number from the description's
[identity], bfloat16 support from its dtypes, and the plugin modules the vendors' tests import (torch_npu._C,
torch_npu.npu.utils, torch_mlu._MLUC). The fact that it is emulated stays visible in the properties.

The vendor-surface checks run in a fresh process under FL_DEVICE=emu:NAME, as vendor code runs (the test session
has named PrivateUse1 'emu')."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import torch_fl
from torch_fl.description.loader import parse
from torch_fl.errors import DescriptionError
from torch_fl.routing.emu import backend_name, identity

REPO = Path(__file__).resolve().parents[2]

# the chip, the name its vendor's runtime reports, its SoC number (-1: none reported), bfloat16
CHIPS = [("npu", "Ascend910B1", 220, True), ("npu-a3", "Ascend910_9391", 250, True),
         ("npu-910", "Ascend910A", 102, False), ("npu-310p", "Ascend310P3", 202, False),
         ("mlu", "MLU590", -1, True), ("musa", "MTT S4000", -1, True),
         ("cuda", "NVIDIA H100 80GB HBM3", -1, True), ("xpu", "Intel(R) Data Center GPU Max 1550", -1, True)]


@pytest.mark.parametrize(("chip", "name", "soc", "bf16"), CHIPS)
def test_the_emulated_device_reports_the_chips_own_identity(chip, name, soc, bf16):
    with torch_fl.emulate(chip):
        module = getattr(torch, backend_name())
        assert module.get_device_name() == module.get_device_name(0) == name
        props = module.get_device_properties(0)
        assert props.name == name and props.total_memory > 0
        assert props.emulated_by.startswith("torch-fl ") and f"description '{chip}'" in props.emulated_by
        assert module.is_bf16_supported() is bf16
        assert identity.soc_version() == soc
        assert torch.fl.get_device_properties().name == name


def test_bf16_support_follows_the_descriptions_dtypes_for_every_chip():
    for chip in ("npu", "npu-910", "npu-310p", "npu-a3", "mlu", "musa", "cuda", "xpu", "rocm"):
        desc = torch_fl.description(chip)
        with torch_fl.emulate(chip):
            assert identity.is_bf16_supported() is ("bfloat16" in desc.dtypes), chip


def test_a_description_without_identity_reports_vendor_and_type():
    desc = parse('schema = 1\nname = "mychip"\nvendor = "Acme"\ndevice_type = "cuda"\ndispatch_key = "CUDA"\n',
                 "mychip.toml")
    assert desc.device_name == "Acme cuda" and desc.soc_version == -1


def test_a_bad_soc_version_names_the_key_and_bounds():
    with pytest.raises(DescriptionError, match=r"soc_version"):
        parse('schema = 1\nname = "x"\ndevice_type = "npu"\ndispatch_key = "PrivateUse1"\n[identity]\n'
              'soc_version = -7\n', "x.toml")


def test_unsupported_cuda_fields_read_as_none_as_on_the_npu():
    with torch_fl.emulate("npu"):
        props = identity.DeviceProperties("Ascend910B1", 1)
        assert props.major is None and props.warp_size is None and props.cube_core_num == 0
        assert getattr(torch, backend_name()).get_device_capability() is None
        with pytest.raises(AttributeError, match="no attribute 'nonsense'"):
            _ = props.nonsense


@pytest.mark.parametrize(("chip", "capability"), [("cuda", (9, 0)), ("musa", (2, 2))])
def test_a_chip_with_a_compute_capability_reports_it(chip, capability):
    with torch_fl.emulate(chip):
        module = getattr(torch, backend_name())
        assert module.get_device_capability() == capability
        props = module.get_device_properties(0)
        assert (props.major, props.minor) == capability


def _run(code: str, **env: str) -> dict:
    environ = {k: v for k, v in os.environ.items() if not k.startswith("FL_") and k != "ACCELERATE_TORCH_DEVICE"}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                          env={**environ, **env}, cwd=REPO, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


# what Ascend/pytorch test/npu/test_soc_version.py, test_torch_npu.py, test_cann_version.py and
# test_serialization_format.py do with the plugin, in our words
NPU_SURFACE = r'''
import json, warnings, torch, torch_npu
import torch_npu._C
import torch_npu.npu.utils as utils
from torch_npu.npu.utils import get_cann_version, _is_gte_cann_version
from torch_npu._C import _npu_getDevice
out = {"name": torch.npu.get_device_name(), "name0": torch_npu.npu.get_device_name("npu:0"),
       "soc": utils.get_soc_version(), "soc_c": torch_npu._C._npu_get_soc_version(),
       "same_utils": torch_npu.npu.utils is utils, "bf16": torch_npu.npu.utils.is_bf16_supported(),
       "inf_nan": utils.is_support_inf_nan(), "cann": get_cann_version(module="CANN"),
       "gte": _is_gte_cann_version("8.1.RC1"), "device": _npu_getDevice(),
       "primary": torch_npu._C._npu_hasPrimaryContext(0), "capability": torch_npu.npu.get_device_capability(0)}
props = torch_npu.npu.get_device_properties(0)
out["props"] = [props.name, props.major, isinstance(props.cube_core_num, int), "torch-fl" in props.emulated_by]
out["overflow"] = [utils.npu_check_overflow(torch.tensor([1.0, float("inf")]).npu()),
                   utils.npu_check_overflow(torch.ones(3).npu())]
try:
    utils.get_npu_overflow_flag()
except RuntimeError as exc:
    out["flag"] = str(exc)
else:
    out["flag"] = "no error"
utils.set_sync_debug_mode("warn")
out["sync_mode"] = utils.get_sync_debug_mode()
errors = []
for call in (lambda: torch.npu.set_sync_debug_mode(3), lambda: torch.npu.set_sync_debug_mode("loud"),
             lambda: torch.npu.set_op_timeout_ms(-1), lambda: torch.npu.can_device_access_peer(0, -1)):
    try:
        call()
    except Exception as exc:
        errors.append(f"{type(exc).__name__}: {exc}")
out["errors"] = errors
out["peer"] = torch.npu.can_device_access_peer(0, 0)
print(json.dumps(out))
'''


@pytest.mark.slow  # two fresh processes: ~10 s
def test_torch_npu_identity_and_utils_as_the_vendors_tests_use_them():
    a2 = _run(NPU_SURFACE, FL_DEVICE="emu:npu")
    assert a2["name"] == a2["name0"] == "Ascend910B1" and a2["soc"] == a2["soc_c"] == 220
    assert a2["same_utils"] and a2["bf16"] and a2["inf_nan"]
    assert a2["cann"] == "" and a2["gte"] is False and a2["device"] == 0 and a2["primary"] is True
    assert a2["capability"] is None
    assert a2["props"] == ["Ascend910B1", None, True, True]
    assert a2["overflow"] == [True, False]
    assert a2["flag"].startswith("Unsupported api when soc_version >= Ascend910B1")
    assert a2["sync_mode"] == 1
    # torch.npu carries torch_npu.npu.utils' exported names after `import torch_npu`, with the vendor's errors
    assert a2["errors"] == ["RuntimeError: invalid value of debug_mode, expected one of 0,1,2 (got 3)",
                            "RuntimeError: invalid value of debug_mode, expected one of `default`, `warn`, `error` "
                            "(got 'loud')",
                            "OverflowError: can't convert negative value to unsigned int",
                            "AssertionError: Invalid peer device id: -1 (1 emulated device(s))"]
    assert a2["peer"] is False  # (a device is not its own peer)
    old = _run(NPU_SURFACE, FL_DEVICE="emu:npu-910")
    assert old["name"] == "Ascend910A" and old["soc"] == 102
    assert old["bf16"] is False and old["inf_nan"] is False and old["flag"] == "no error"


# three steps of an optimizer on `device`, the weights after (the fused optimizers against torch.optim's)
TRAIN = r'''
def train(make, device):
    torch.manual_seed(0)
    m = torch.nn.Linear(4, 3).to(device)
    opt = make(m.parameters())
    for _ in range(3):
        opt.zero_grad(); m(torch.ones(2, 4, device=device)).pow(2).sum().backward(); opt.step()
    return m.weight.detach().cpu()
'''


# what Cambricon/torch_mlu test/ imports: _MLUC, torch_mlu.optimizers, torch.backends.mlu
MLU_SURFACE = r'''
import json, torch, torch_mlu
from torch_mlu._MLUC import _mlu_hasPrimaryContext
from torch_mlu.optimizers import FusedAdam, FusedSGD, FusedLAMB
out = {"name": torch.mlu.get_device_name(), "primary": _mlu_hasPrimaryContext(0),
       "native": torch_mlu._MLUC.__name__, "tf32": torch.backends.mlu.matmul.allow_tf32,
       "plans": torch.backends.mlu.cnfft_plan_cache.max_size}
torch.set_float32_matmul_precision("high")  # torch_mlu's tests: the matmul TF32 switch follows it
out["tf32"] = [out["tf32"], torch.backends.mlu.matmul.allow_tf32]
torch.backends.mlu.matmul.allow_tf32 = False
out["tf32"].append(torch.get_float32_matmul_precision())
''' + TRAIN + r'''
out["adam"] = [torch.equal(train(lambda p: FusedAdam(p, lr=0.1, weight_decay=0.1, adam_w_mode=w), "mlu"),
                           train(lambda p: (torch.optim.AdamW if w else torch.optim.Adam)(p, lr=0.1, weight_decay=0.1),
                                 "cpu")) for w in (True, False)]
out["sgd"] = torch.equal(train(lambda p: FusedSGD(p, lr=0.1, momentum=0.9), "mlu"),
                         train(lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9), "cpu"))
try:
    FusedLAMB(torch.nn.Linear(1, 1).parameters())
except NotImplementedError as exc:
    out["lamb"] = str(exc)
print(json.dumps(out))
'''


@pytest.mark.slow  # a fresh process: ~5 s
def test_torch_mlu_offers_what_its_tests_import():
    out = _run(MLU_SURFACE, FL_DEVICE="emu:mlu")
    assert out["name"] == "MLU590" and out["primary"] is True and out["native"] == "torch_mlu._MLUC"
    assert out["tf32"] == [False, True, "highest"] and out["plans"] > 0
    assert out["adam"] == [True, True] and out["sgd"] is True
    assert out["lamb"].startswith("torch_mlu.optimizers.FusedLAMB is not emulated by torch-fl")


# torch_musa is torch.musa: its test framework calls torch_musa.is_available(), torch_musa.Event, torch_musa._sleep
MUSA_SURFACE = r'''
import json, torch, torch_musa
from torch_musa.optim import FusedAdam, FusedAdamW
out = {"same": torch_musa.set_device == torch.musa.set_device, "available": torch_musa.is_available(),
       "count": torch_musa.device_count(), "name": torch_musa.get_device_name(),
       "capability": list(torch_musa.get_device_capability()), "event": hasattr(torch_musa.Event, "record"),
       "tensor": torch_musa.FloatTensor(2).device.type, "listed": "current_device" in dir(torch_musa)}
''' + TRAIN + r'''
out["adamw"] = torch.equal(train(lambda p: FusedAdamW(p, lr=0.1), "musa"), train(lambda p: torch.optim.AdamW(p, lr=0.1), "cpu"))
out["adam"] = torch.equal(train(lambda p: FusedAdam(p, lr=0.1), "musa"), train(lambda p: torch.optim.Adam(p, lr=0.1), "cpu"))
try:
    torch_musa.no_such_name
except AttributeError as exc:
    out["missing"] = str(exc)
# the vendor's test framework (torch_musa/testing/common_utils.py) starts with this import
from torch_musa.core._utils import _get_musa_arch, _get_musa_device_index
import os
out["arch"] = [_get_musa_arch(), _get_musa_device_index("musa:0")]
os.environ["TORCH_MUSA_ARCH"] = "31"
out["arch"].append(_get_musa_arch())
# torch_musa sets torch.version.musa on import (the SDK's MUSA_VERSION); its tests compare float() of it with 4000
out["version"] = [torch.version.musa, float(torch.version.musa) >= 4000]
print(json.dumps(out))
'''


@pytest.mark.slow  # a fresh process: ~5 s
def test_torch_musa_is_its_device_module_with_fused_optimizers():
    out = _run(MUSA_SURFACE, FL_DEVICE="emu:musa")
    assert out["same"] and out["available"] and out["count"] >= 1 and out["name"] == "MTT S4000"
    assert out["capability"] == [2, 2] and out["event"] and out["tensor"] == "musa" and out["listed"]
    assert out["adamw"] and out["adam"]
    assert out["missing"].startswith("module 'torch_musa' has no attribute 'no_such_name'")
    assert out["arch"] == [22, 0, 31]  # QY2 (capability 2.2), as the vendor computes it; TORCH_MUSA_ARCH wins
    assert out["version"] == ["4030", True]  # MUSA SDK 4.3.0
