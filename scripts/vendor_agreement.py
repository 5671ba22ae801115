#!/usr/bin/env python
"""Coverage of public models on vendor chips against the same step on the emulated chip.

For each model (Hugging Face transformers architectures with tiny random configs: BERT, GPT-2, Llama;
built from their config classes, nothing downloaded) and each chip (npu, mlu, musa, xpu):

1. ``torchfl coverage MODEL --device CHIP --train``: the routes of a training step, traced on fake
   tensors from the chip's description (its vendor op table);
2. the same training step (forward, loss, backward, AdamW) run for real under ``FL_DEVICE=emu:CHIP`` in a
   fresh process, compared with the plain CPU step (loss and every parameter after the step), with the
   router's counts of non-native calls.

Agreement: both say the step runs (coverage: no unsupported call; emulation: no
UnsupportedOperatorError) or both stop, and the set of ops coverage routes to translate/fallback equals
the set the emulated step counted as non-native.

Usage: vendor_agreement.py [--models bert,gpt2,llama] [--chips npu,mlu,musa,xpu] [--json FILE]
Also the model factories for torchfl coverage: scripts/vendor_agreement.py:bert (gpt2, llama).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

VOCAB, SEQ, BATCH = 99, 16, 2
MODELS = ("bert", "gpt2", "llama")
CHIPS = ("npu", "mlu", "musa", "xpu")


def _lm(model_cls: Any, config: Any) -> tuple[Any, tuple[torch.Tensor], Any]:
    torch.manual_seed(0)
    model = model_cls(config)
    ids = torch.randint(0, VOCAB, (BATCH, SEQ))

    def loss_fn(out: Any, ids: torch.Tensor) -> torch.Tensor:
        logits = out.logits if hasattr(out, "logits") else out[0]
        return F.cross_entropy(logits.float().flatten(0, 1), ids.to(logits.device).flatten())

    return model, (ids,), loss_fn


def bert():
    from transformers import BertConfig, BertForMaskedLM

    return _lm(BertForMaskedLM, BertConfig(vocab_size=VOCAB, hidden_size=32, num_hidden_layers=2,
                                           num_attention_heads=4, intermediate_size=37,
                                           max_position_embeddings=64, attn_implementation="eager"))


def gpt2():
    from transformers import GPT2Config, GPT2LMHeadModel

    return _lm(GPT2LMHeadModel, GPT2Config(vocab_size=VOCAB, n_embd=32, n_layer=2, n_head=4, n_positions=64,
                                           attn_implementation="eager"))


def llama():
    from transformers import LlamaConfig, LlamaForCausalLM

    return _lm(LlamaForCausalLM, LlamaConfig(vocab_size=VOCAB, hidden_size=32, num_hidden_layers=2,
                                             num_attention_heads=4, num_key_value_heads=2,
                                             intermediate_size=37, max_position_embeddings=64,
                                             attn_implementation="eager"))


# The emulated step (run in a child process under FL_DEVICE=emu:CHIP) -------------------------------
def _step(model: torch.nn.Module, inputs: tuple, loss_fn: Any) -> float:
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, foreach=False)
    loss = loss_fn(model(*inputs), *inputs)
    loss.backward()
    opt.step()
    return loss.item()


def _factory(name: str) -> Any:
    """A model of this file by name, or any 'path.py:factory' entry point."""
    if ":" not in name:
        return globals()[name]()
    from torch_fl.analysis.model import load_model

    spec = load_model(name)
    return spec.model, tuple(spec.inputs), spec.loss_fn


def emulated_step(name: str) -> dict[str, Any]:
    import copy

    import torch_fl  # noqa: F401  (makes torch.fl)
    from torch_fl.errors import UnsupportedOperatorError

    device = torch.fl.device()
    model, inputs, loss_fn = _factory(name)
    reference = copy.deepcopy(model)
    model.train(False), reference.train(False)  # no dropout: the two steps compare exactly
    expected = _step(reference, inputs, loss_fn)
    model.to(device)
    try:
        loss = _step(model, tuple(t.to(device) for t in inputs), loss_fn)
    except UnsupportedOperatorError as exc:
        return {"device": str(device), "ran": False, "error": str(exc).splitlines()[0], "non_native": {}}
    worst = max(((p.detach().cpu() - r.detach()).abs().max().item()
                 for p, r in zip(model.parameters(), reference.parameters(), strict=True)), default=0.0)
    stats = torch.fl.route_stats()
    non_native: dict[str, str] = {}
    for row in stats:
        non_native.setdefault(row["op"], row["route"])
    return {"device": str(device), "ran": True, "loss": loss, "cpu_loss": expected, "max_param_diff": worst,
            "non_native": non_native}


def coverage_of(name: str, chip: str) -> dict[str, Any]:
    from torch_fl.analysis.coverage import coverage
    from torch_fl.analysis.model import load_model

    data = coverage(load_model(name if ":" in name else f"{__file__}:{name}"), chip, train=True).data
    top = [op for op in data["ops"] if not op["via"]]
    return {"native_ops_share": data["summary"]["native_ops_share"],
            "native_calls_share": data["summary"]["native_calls_share"],
            "unsupported_calls": data["summary"]["unsupported_calls"],
            "non_native": {op["op"]: op["route"] for op in top if op["route"] != "native"},
            "version": (data.get("plugin") or {}).get("version")}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", default=",".join(MODELS),
                        help="names of this file's models, or path.py:factory entry points")
    parser.add_argument("--chips", default=",".join(CHIPS))
    parser.add_argument("--json")
    parser.add_argument("--child", help=argparse.SUPPRESS)  # MODEL: run the emulated step, print JSON
    args = parser.parse_args(argv)
    if args.child:
        print(json.dumps(emulated_step(args.child)))
        return 0
    rows = []
    agree_all = True
    for chip in args.chips.split(","):
        for name in args.models.split(","):
            started = time.perf_counter()
            cov = coverage_of(name, chip)
            done = subprocess.run([sys.executable, __file__, "--child", name], capture_output=True, text=True,
                                  env={**os.environ, "FL_DEVICE": f"emu:{chip}"}, timeout=600, check=False)
            if done.returncode:
                emu = {"ran": False, "error": f"exit {done.returncode}: {done.stderr[-500:]}", "non_native": {}}
            else:
                emu = json.loads(done.stdout.strip().splitlines()[-1])
            runs_agree = (cov["unsupported_calls"] == 0) == emu["ran"]
            routes_agree = set(cov["non_native"]) == set(emu["non_native"]) if emu["ran"] else True
            agree = runs_agree and routes_agree
            agree_all &= agree
            rows.append({"chip": chip, "model": name, "coverage": cov, "emulated": emu, "agree": agree,
                         "seconds": round(time.perf_counter() - started, 1)})
            print(f"{chip:5} {Path(name).name:6} coverage: {cov['native_ops_share']:.1%} of ops native "
                  f"(plugin line {cov['version']}), unsupported calls {cov['unsupported_calls']}, non-native "
                  f"{sorted(cov['non_native'])}; emulated on {emu.get('device', '?')}: "
                  + (f"ran, loss {emu['loss']:.6f} vs CPU {emu['cpu_loss']:.6f}, max param diff "
                     f"{emu['max_param_diff']:.2e}, non-native {sorted(emu['non_native'])}" if emu["ran"]
                     else f"stopped: {emu['error'][:160]}")
                  + f"; agree: {agree}", flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1), encoding="utf-8")
    print(f"{sum(r['agree'] for r in rows)}/{len(rows)} (chip, model) pairs agree")
    return 0 if agree_all else 1


if __name__ == "__main__":
    sys.exit(main())
