"""Hugging Face hub kernels under emulation (routing/emu/hub_kernels.py): transformers turns on the
``kernels`` package in every from_pretrained; its binaries are for the real chip and it refuses the device
type ``emu``, so the emulated chip runs each layer's PyTorch forward and loading onto the device trains."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

pytest.importorskip("transformers")
pytest.importorskip("kernels")

SCRIPT = textwrap.dedent("""
    import json, os, sys, tempfile
    import torch, torch_fl
    from transformers import AutoConfig, AutoModelForCausalLM
    torch.manual_seed(0)
    cfg = AutoConfig.for_model("llama", hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                               num_attention_heads=4, num_key_value_heads=2, vocab_size=100)
    path = tempfile.mkdtemp()
    AutoModelForCausalLM.from_config(cfg).save_pretrained(path)
    ids = torch.randint(0, 100, (2, 8))
    losses = {}
    for where in ("cpu", torch.fl.device()):
        try:
            model = AutoModelForCausalLM.from_pretrained(path, device_map=where)
        except Exception as exc:
            print(json.dumps({"error": f"{type(exc).__name__}: {exc}"}))
            sys.exit(0)
        out = model(input_ids=ids.to(where), labels=ids.to(where))
        out.loss.backward()
        grad = model.model.layers[0].mlp.up_proj.weight.grad
        losses[str(where)] = [out.loss.item(), grad.cpu().abs().sum().item(), str(grad.device)]
    print(json.dumps({"runs": losses, "env": os.environ.get("USE_HUB_KERNELS")}))
""")


def _run(env_extra: dict[str, str]) -> dict:
    env = {k: v for k, v in os.environ.items() if k != "USE_HUB_KERNELS"}
    env.update({"FL_DEVICE": "emu:cuda", "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"}, **env_extra)
    done = subprocess.run([sys.executable, "-c", SCRIPT], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.slow
def test_from_pretrained_onto_the_emulated_device_trains_as_on_the_cpu():
    result = _run({})
    assert "error" not in result, result
    (cpu_loss, cpu_grad, _), (emu_loss, emu_grad, grad_device) = result["runs"].values()
    assert grad_device.startswith("emu")
    assert emu_loss == cpu_loss and emu_grad == cpu_grad
    assert result["env"] == "0"  # set for the process (DataLoader workers inherit it)


@pytest.mark.slow
def test_a_user_who_asks_for_hub_kernels_gets_the_libraries_own_answer():
    result = _run({"USE_HUB_KERNELS": "1"})
    assert "Unsupported device type 'emu'" in result.get("error", ""), result
