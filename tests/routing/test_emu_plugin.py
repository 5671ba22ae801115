"""Vendor code unmodified on an emulated plugin chip: ``import torch_npu`` (torch_mlu, torch_musa) under
``FL_DEVICE=emu:NAME``, the vendor's device-module surface, its migration switch, the libraries' own
vendor checks, and checking from the first device tensor.

Each check runs in a fresh process: PyTorch names its PrivateUse1 slot once per process, and the test
session has named it 'emu' (conftest)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.slow  # a fresh process each: ~4-8 s


def _run(code: str, *, expect_ok: bool = True, **env: str) -> dict:
    # (no FL_* and no device choice that an earlier test's use_fl_device() left for accelerate)
    environ = {k: v for k, v in os.environ.items() if not k.startswith("FL_") and k != "ACCELERATE_TORCH_DEVICE"}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                          env={**environ, **env}, cwd=REPO, check=False)
    if expect_ok:
        assert done.returncode == 0, done.stderr[-3000:]
    lines = done.stdout.strip().splitlines()
    assert lines, done.stderr[-3000:]
    return json.loads(lines[-1])


# `import torch` alone (no torch_fl) is what vendor code does
PLAIN_IMPORT = r'''
import importlib.util, json, sys, torch
out = {"torch.npu": hasattr(torch, "npu"), "spec": importlib.util.find_spec("torch_npu") is not None}
import torch_npu
out["same_module"] = torch_npu.npu is torch.npu
out["version"] = torch_npu.__version__
out["file"] = bool(torch_npu.__file__)
x = torch.randn(4, 4).npu()
out["device"] = str((x @ x).device)
print(json.dumps(out))
'''


def test_import_torch_alone_gives_the_vendor_module_and_package():
    out = _run(PLAIN_IMPORT, FL_DEVICE="emu:npu")
    assert out["torch.npu"] and out["spec"] and out["same_module"] and out["file"]
    assert out["version"].endswith("+torchfl.emu")
    assert out["device"] == "npu:0"


SURFACE = r'''
import json, torch, torch_npu
out = {}
torch.npu.set_device("npu:0"); torch.npu.set_device(torch.device("npu", 0)); torch.npu.set_device(0)
try:
    torch.npu.set_device("npu:3")
except RuntimeError as exc:
    out["bad_index"] = str(exc)
try:
    torch.npu.set_device("cuda:0")
except ValueError as exc:
    out["bad_type"] = str(exc)
torch.npu.config.allow_internal_format = False
torch.npu.matmul.allow_hf32 = True
torch.npu.set_compile_mode(jit_compile=False)
out["jit_false"] = torch.npu.is_jit_compile_false()
props = torch.npu.get_device_properties(0)
out["props"] = [props.name, props.total_memory > 0]
half = torch.npu.HalfTensor(2, 3)
out["types"] = [str(half.device), str(half.dtype), isinstance(half, torch.npu.HalfTensor),
                isinstance(half, torch.npu.FloatTensor), isinstance(torch.ones(1).half(), torch.npu.HalfTensor)]
torch.manual_seed(0)
ref = torch.nn.Linear(8, 4)
model = torch.nn.Linear(8, 4)
model.load_state_dict(ref.state_dict())
model = model.npu()
x = torch.randn(3, 8)
def step(m, dev, autocast, scaler):
    opt = torch.optim.SGD(m.parameters(), lr=0.1)
    with autocast:
        y = m(x.to(dev))
    out.setdefault("autocast_dtypes", []).append(str(y.dtype))
    scaler.scale(y.float().pow(2).sum()).backward()
    scaler.step(opt); scaler.update()
    return scaler.get_scale()
s1 = step(model, "npu:0", torch.npu.amp.autocast(dtype=torch.bfloat16), torch.npu.amp.GradScaler(init_scale=1024.0))
s2 = step(ref, "cpu", torch.autocast("cpu", dtype=torch.bfloat16), torch.amp.GradScaler("cpu", init_scale=1024.0))
out["scales"] = [s1, s2]
out["equal"] = all(torch.equal(a.detach().cpu(), b.detach()) for a, b in zip(model.parameters(), ref.parameters()))
out["memory"] = torch.npu.memory_stats()["allocated_bytes.all.current"] == torch.npu.memory_allocated() > 0
out["reserved"] = torch.npu.memory_reserved() >= torch.npu.memory_allocated()
stream = torch.npu.current_stream()
with torch.npu.stream(stream):
    pass
torch.npu.synchronize()
out["bf16"] = torch.npu.is_bf16_supported()
print(json.dumps(out))
'''


def test_the_device_module_surface_vendor_code_uses():
    out = _run(SURFACE, FL_DEVICE="emu:npu")
    assert "npu:3 does not exist" in out["bad_index"] and "FL_EMU_DEVICES=4" in out["bad_index"]
    assert "'cuda' device, not one of the emulated chip's" in out["bad_type"]
    assert out["jit_false"] is True
    assert out["props"] == ["Ascend910B1", True]  # the chip's own name (identity.device_name of npu.toml)
    assert out["types"] == ["npu:0", "torch.float16", True, False, False]
    assert out["autocast_dtypes"] == ["torch.bfloat16", "torch.bfloat16"]
    assert out["scales"][0] == out["scales"][1] and out["equal"], out
    assert out["memory"] and out["reserved"] and out["bf16"]


MIGRATION = r'''
import json, torch
import torch_npu
from torch_npu.contrib import transfer_to_npu
x = torch.ones(2).cuda()
m = torch.nn.Linear(2, 2).cuda()
print(json.dumps({"x": str(x.device), "m": str(next(m.parameters()).device), "avail": torch.cuda.is_available(),
                  "y": str(torch.zeros(1, device="cuda").device)}))
'''


def test_transfer_to_npu_runs_cuda_code_on_the_npu():
    out = _run(MIGRATION, FL_DEVICE="emu:npu")
    assert out == {"x": "npu:0", "m": "npu:0", "avail": True, "y": "npu:0"}


@pytest.mark.parametrize(("chip", "plugin", "check", "migration"), [
    ("mlu", "torch_mlu", "is_torch_mlu_available", "import torch_mlu.utils.gpu_migration"),
    ("musa", "torch_musa", "is_torch_musa_available", ""),
    ("npu", "torch_npu", "is_torch_npu_available", "import torch_npu.contrib.transfer_to_npu"),
])
def test_the_libraries_see_the_vendor_chip(chip, plugin, check, migration):
    code = (f"import json, torch\nimport transformers.utils as hf\nimport accelerate.utils as acc\n"
            f"import {plugin}\n{migration}\n"
            f"out = {{'hf': hf.{check}(), 'module': getattr(torch, '{chip}').is_available(),\n"
            f"       'device': str(torch.ones(1).{chip}().device)}}\n"
            f"if '{migration}': out['cuda'] = str(torch.ones(1).cuda().device)\n"
            f"print(json.dumps(out))")
    out = _run(code, FL_DEVICE=f"emu:{chip}")
    assert out["hf"] is True and out["module"] is True and out["device"] == f"{chip}:0"
    if migration:
        assert out["cuda"] == f"{chip}:0"


ACCELERATOR = r'''
import json, torch
from accelerate import Accelerator
from accelerate.utils import is_npu_available
acc = Accelerator()
model = torch.nn.Linear(4, 2)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
model, opt = acc.prepare(model, opt)
loss = model(torch.ones(3, 4, device=acc.device)).sum()
acc.backward(loss); opt.step()
print(json.dumps({"npu": is_npu_available(), "device": str(acc.device),
                  "param": str(next(model.parameters()).device)}))
'''


def test_accelerate_picks_the_npu_through_its_own_vendor_code():
    out = _run(ACCELERATOR, FL_DEVICE="emu:npu")
    # (accelerate names the single-process device by type, as it does on a real NPU)
    assert out == {"npu": True, "device": "npu", "param": "npu:0"}


FIRST_TENSOR = r'''
import json, torch
out = {}
try:
    torch.ones(2, dtype=torch.uint16).npu()   # no torch.fl.device() call anywhere
    out["first"] = "no error"
except Exception as exc:
    out["first"] = f"{type(exc).__name__}: {exc}"
x = torch.ones(2).npu()
try:
    x.to(torch.uint16)
    out["later"] = "no error"
except Exception as exc:
    out["later"] = type(exc).__name__
print(json.dumps(out))
'''


def test_checked_from_the_first_device_tensor():
    out = _run(FIRST_TENSOR, FL_DEVICE="emu:npu")
    assert out["first"].startswith("UnsupportedOperatorError") and "uint16" in out["first"]
    assert "not in precision.dtypes" in out["first"]
    assert out["later"] == "UnsupportedOperatorError"


def test_never_over_a_real_plugin(tmp_path):
    # a package named torch_npu on sys.path stands for the installed vendor plugin: `import torch_npu`
    # must load it, not the emulation, and the log says why the emulation stands aside
    package = tmp_path / "torch_npu"
    package.mkdir()
    (package / "__init__.py").write_text("REAL = True\n")
    code = ("import json, logging, torch\nimport torch_npu\n"
            "from torch_fl.routing.emu import plugin\n"
            "print(json.dumps({'real': getattr(torch_npu, 'REAL', False), 'emulated': sorted(plugin.installed())}))")
    out = _run(code, FL_DEVICE="emu:npu", PYTHONPATH=f"{tmp_path}{os.pathsep}{os.environ.get('PYTHONPATH', '')}")
    assert out == {"real": True, "emulated": []}


def test_no_emulated_plugin_without_an_emulated_plugin_chip():
    code = ("import importlib.util, json, torch, torch_fl\n"
            "print(json.dumps({'spec': importlib.util.find_spec('torch_npu') is not None, "
            "'npu': hasattr(torch, 'npu')}))")
    assert _run(code, FL_DEVICE="emu:cuda") == {"spec": False, "npu": False}
    assert _run(code) == {"spec": False, "npu": False}


HF_NPU_FLASH = r'''
import json, torch, torch_npu
from transformers import LlamaConfig, LlamaForCausalLM
cfg = LlamaConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=4,
                  num_key_value_heads=2, vocab_size=64, max_position_embeddings=32)
torch.manual_seed(0)
ref = LlamaForCausalLM(cfg).to(torch.bfloat16)
ids = torch.randint(0, 64, (2, 8))
out = {"fused_ops": [name for name in ("npu_fusion_attention", "npu_rms_norm", "npu_rotary_mul", "npu_swiglu")
                     if callable(getattr(torch_npu, name, None))]}
for impl in ("flash_attention_2", "sdpa"):
    m = LlamaForCausalLM._from_config(cfg, attn_implementation=impl, dtype=torch.bfloat16)
    m.load_state_dict(ref.state_dict())
    m = m.npu()
    loss = m(ids.npu(), labels=ids.npu()).loss
    loss.backward()
    out[impl] = loss.item()
    out[impl + "_grad_device"] = str(m.model.layers[0].self_attn.q_proj.weight.grad.device)
out["routes"] = sorted({(r["op"], r["route"]) for r in torch.fl.route_stats() if r["op"].startswith("npu::")})
print(json.dumps(out))
'''


def test_transformers_npu_flash_attention_runs_on_the_vendor_fused_op():
    # transformers' own npu path (integrations/npu_flash_attention.py) calls torch_npu.npu_fusion_attention
    out = _run(HF_NPU_FLASH, FL_DEVICE="emu:npu")
    assert out["fused_ops"] == ["npu_fusion_attention", "npu_rms_norm", "npu_rotary_mul", "npu_swiglu"]
    assert out["flash_attention_2"] == pytest.approx(out["sdpa"], rel=1e-2)
    assert out["flash_attention_2_grad_device"] == "npu:0"
    assert [op for op, _ in out["routes"]] == ["npu::npu_fusion_attention.default",
                                               "npu::npu_fusion_attention_grad.default"]
    assert {route for _, route in out["routes"]} == {"kernel"}


PLUGIN_FIRST = r'''
import json
import torch_npu                      # before torch, as Ascend samples often start
from torch_npu.npu.amp import GradScaler, autocast
from torch_npu.optim import NpuFusedAdamW, NpuFusedLamb
from torch_npu.optim.npu_fused_optim_base import NpuFusedOptimizerBase
import torch
out = {"optim_base": issubclass(NpuFusedAdamW, torch.optim.AdamW) and issubclass(NpuFusedLamb, NpuFusedOptimizerBase)}
torch.manual_seed(0)
host = [torch.randn(3, 2), torch.randn(4)]
dev = [p.clone().npu().requires_grad_() for p in host]
ref = [p.clone().requires_grad_() for p in host]
for group, opt in ((dev, NpuFusedAdamW(dev, lr=2e-3, weight_decay=0.05)),
                   (ref, torch.optim.AdamW(ref, lr=2e-3, weight_decay=0.05))):
    for p in group:
        p.grad = p.detach() / 100.0
    opt.step()
out["adamw_equal"] = all(torch.equal(d.detach().cpu(), r.detach()) for d, r in zip(dev, ref))
try:
    NpuFusedLamb(dev)
except NotImplementedError as exc:
    out["lamb"] = str(exc)
torch_npu._C._npu_setDevice(0)
out["native_calls"] = [torch_npu._C._npu_getDevice(), torch_npu._C._npu_getDeviceCount()]
out["scaler"] = type(GradScaler()).__mro__[1].__name__
print(json.dumps(out))
'''


def test_the_plugin_imported_before_torch_and_its_optimizers():
    out = _run(PLUGIN_FIRST, FL_DEVICE="emu:npu")
    assert out["optim_base"] and out["adamw_equal"]
    assert "NpuFusedLamb is not emulated by torch-fl" in out["lamb"] and "torch_optimizer.Lamb" in out["lamb"]
    assert out["native_calls"] == [0, 1]
    assert out["scaler"] == "GradScaler"


TRAINER = r'''
import json, torch
from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainingArguments
torch.manual_seed(0)
model = GPT2LMHeadModel(GPT2Config(n_layer=1, n_head=2, n_embd=16, vocab_size=50, n_positions=16))
data = [{"input_ids": torch.randint(0, 50, (8,)), "labels": torch.randint(0, 50, (8,))} for _ in range(4)]
args = TrainingArguments(output_dir=OUT, per_device_train_batch_size=2, max_steps=2, report_to=[],
                         save_strategy="no", logging_steps=1, disable_tqdm=True)
trainer = Trainer(model=model, args=args, train_dataset=data)
result = trainer.train()
print(json.dumps({"args_device": str(args.device), "param": str(next(model.parameters()).device),
                  "loss": result.training_loss}))
'''


def test_trainer_picks_the_npu_through_its_own_vendor_code(tmp_path):
    # no use_fl_device(): transformers' TrainingArguments chooses the npu because is_torch_npu_available()
    out = _run(f"OUT = {str(tmp_path)!r}\n" + TRAINER, FL_DEVICE="emu:npu")
    assert out["args_device"] == "npu:0" and out["param"] == "npu:0"
    assert 0 < out["loss"] < 10


TRAINER_RESUME = r'''
import json, torch
from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainingArguments
chip = getattr(torch, CHIP)
out = {"random": [len(chip.random.get_rng_state()), len(chip.get_rng_state_all())]}
data = [{"input_ids": torch.randint(0, 50, (8,), generator=torch.Generator().manual_seed(i))} for i in range(4)]
for row in data:
    row["labels"] = row["input_ids"]

def train(resume):
    args = TrainingArguments(output_dir=OUT, per_device_train_batch_size=2, max_steps=2, report_to=[],
                             save_strategy="steps", save_steps=1, logging_strategy="no", disable_tqdm=True,
                             dataloader_pin_memory=False)
    torch.manual_seed(0)
    model = GPT2LMHeadModel(GPT2Config(n_layer=1, n_head=2, n_embd=16, vocab_size=50, n_positions=16))
    Trainer(model=model, args=args, train_dataset=data).train(resume_from_checkpoint=resume)
    return model

straight = train(None)
state = torch.load(OUT + "/checkpoint-1/rng_state.pth", weights_only=False)
resumed = train(OUT + "/checkpoint-1")
out["saved"] = sorted(state)
out["device"] = str(resumed.transformer.wte.weight.device)
out["equal"] = all(torch.equal(a.cpu(), b.cpu()) for a, b in zip(straight.parameters(), resumed.parameters()))
print(json.dumps(out))
'''


@pytest.mark.parametrize("chip", ["npu", "mlu"])
def test_trainer_checkpoint_and_resume_save_the_chips_generator(tmp_path, chip):
    # transformers' Trainer saves torch.npu.random.get_rng_state() in every checkpoint (torch.mlu.random on
    # mlu) and sets it back on resume: the emulated chip's module has the vendor's `random` submodule
    out = _run(f"OUT = {str(tmp_path)!r}\nCHIP = {chip!r}\n" + TRAINER_RESUME, FL_DEVICE=f"emu:{chip}")
    assert out["random"][1] == 1 and out["random"][0] > 0
    assert chip in out["saved"] and out["device"] == f"{chip}:0"
    assert out["equal"]  # resumed from step 1, the weights end where the uninterrupted run's do


def test_doctor_says_the_plugin_is_the_emulation():
    environ = {k: v for k, v in os.environ.items() if not k.startswith("FL_")}
    done = subprocess.run([sys.executable, "-m", "torch_fl", "doctor"], capture_output=True, text=True,
                          timeout=300, env={**environ, "FL_DEVICE": "emu:npu"}, cwd=REPO, check=False)
    line = next(line for line in done.stdout.splitlines() if line.strip().startswith("plugin:"))
    assert "torch_npu 2.14.0+torchfl.emu (torch-fl's emulation: `import torch_npu` gives it" in line
