"""Public models nobody here wrote, on emulated chips: does a training step run, does it equal the CPU,
and does `torchfl coverage` agree with what the emulator did?

Every model is a tiny random-weight configuration of a public implementation installed from PyPI
(transformers, diffusers, x-transformers). Each name is also a model entry point for the tools:

    torchfl coverage scripts/model_zoo.py:gpt2 --device emu:cuda --train

Run (writes the Markdown table of docs/analysis.md to stdout, a row per model and chip):

    python scripts/model_zoo.py                      # every model, emu:cuda and emu:mps
    python scripts/model_zoo.py --models gpt2,t5 --chips emu:cuda --json zoo.json

Each (model, chip) runs in a fresh process (the emulated chip is fixed per process, as FL_DEVICE is):
"step runs" is one forward + loss + backward + SGD (momentum) step on the emulated device; "equals CPU" compares
the loss, every gradient and every updated parameter with the same step on the plain CPU (rtol 1e-4,
atol 1e-5; "bitwise" when they are identical); "coverage agrees" compares `torchfl coverage --train`'s
verdict (would it run?) with what the step did.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

ROOT = Path(__file__).resolve().parent.parent
VOCAB = 96


def _tokens(batch: int = 2, length: int = 12) -> torch.Tensor:
    return torch.randint(1, VOCAB, (batch, length))


def _logits_loss(output: Any, *inputs: Any) -> torch.Tensor:
    return output.logits.float().pow(2).mean()


class _Keywords(torch.nn.Module):
    """Calls a model with keyword inputs (T5's decoder ids, Whisper's features, a UNet's conditioning):
    the tools call ``model(*example_inputs)``."""

    def __init__(self, model: torch.nn.Module, *names: str) -> None:
        super().__init__()
        self.model = model
        self.names = names

    def forward(self, *inputs: Any) -> Any:
        return self.model(**dict(zip(self.names, inputs, strict=True)))


def _hf(config_cls: str, model_cls: str, **config: Any) -> torch.nn.Module:
    import transformers

    torch.manual_seed(0)
    cfg = getattr(transformers, config_cls)(**config)
    return getattr(transformers, model_cls)(cfg).train()


_DECODER = dict(vocab_size=VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64)


def bert() -> tuple:
    model = _hf("BertConfig", "BertForMaskedLM", vocab_size=VOCAB, hidden_size=32, num_hidden_layers=2,
                num_attention_heads=4, intermediate_size=64, max_position_embeddings=64)
    return model, (_tokens(),), _logits_loss


def gpt2() -> tuple:
    model = _hf("GPT2Config", "GPT2LMHeadModel", vocab_size=VOCAB, n_embd=32, n_layer=2, n_head=4,
                n_positions=64)
    return model, (_tokens(),), _logits_loss


def llama() -> tuple:
    return _hf("LlamaConfig", "LlamaForCausalLM", **_DECODER), (_tokens(),), _logits_loss


def qwen2() -> tuple:
    return _hf("Qwen2Config", "Qwen2ForCausalLM", **_DECODER), (_tokens(),), _logits_loss


def mistral() -> tuple:
    return _hf("MistralConfig", "MistralForCausalLM", **_DECODER, sliding_window=8), (_tokens(),), _logits_loss


def t5() -> tuple:
    model = _hf("T5Config", "T5ForConditionalGeneration", vocab_size=VOCAB, d_model=32, d_kv=8, d_ff=64,
                num_layers=2, num_heads=4, decoder_start_token_id=0)
    return _Keywords(model, "input_ids", "decoder_input_ids"), (_tokens(), _tokens(length=6)), _logits_loss


def whisper() -> tuple:
    model = _hf("WhisperConfig", "WhisperForConditionalGeneration", vocab_size=VOCAB, d_model=32,
                encoder_layers=2, decoder_layers=2, encoder_attention_heads=4, decoder_attention_heads=4,
                encoder_ffn_dim=64, decoder_ffn_dim=64, num_mel_bins=16, max_source_positions=16,
                max_target_positions=32, decoder_start_token_id=1, pad_token_id=0, eos_token_id=2,
                bos_token_id=1)
    features = torch.randn(2, 16, 32)
    return _Keywords(model, "input_features", "decoder_input_ids"), (features, _tokens(length=6)), _logits_loss


def vit() -> tuple:
    model = _hf("ViTConfig", "ViTForImageClassification", image_size=16, patch_size=4, num_channels=3,
                hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64,
                num_labels=5)
    return model, (torch.randn(2, 3, 16, 16),), _logits_loss


def _sample_loss(output: Any, *inputs: Any) -> torch.Tensor:
    return output.sample.float().pow(2).mean()


def unet2d() -> tuple:
    from diffusers import UNet2DModel

    torch.manual_seed(0)
    model = UNet2DModel(sample_size=16, in_channels=3, out_channels=3, layers_per_block=1,
                        block_out_channels=(16, 32), norm_num_groups=8,
                        down_block_types=("DownBlock2D", "AttnDownBlock2D"),
                        up_block_types=("AttnUpBlock2D", "UpBlock2D")).train()
    return model, (torch.randn(2, 3, 16, 16), 10), _sample_loss  # the timestep as a Python number


def unet2d_condition() -> tuple:
    from diffusers import UNet2DConditionModel

    torch.manual_seed(0)
    model = UNet2DConditionModel(sample_size=16, in_channels=4, out_channels=4, layers_per_block=1,
                                 block_out_channels=(16, 32), norm_num_groups=8, cross_attention_dim=24,
                                 attention_head_dim=4,
                                 down_block_types=("CrossAttnDownBlock2D", "DownBlock2D"),
                                 up_block_types=("UpBlock2D", "CrossAttnUpBlock2D")).train()
    inputs = (torch.randn(2, 4, 16, 16), 10, torch.randn(2, 5, 24))
    return _Keywords(model, "sample", "timestep", "encoder_hidden_states"), inputs, _sample_loss


def x_transformer() -> tuple:
    from x_transformers import Decoder, TransformerWrapper

    torch.manual_seed(0)
    model = TransformerWrapper(num_tokens=VOCAB, max_seq_len=32,
                               attn_layers=Decoder(dim=32, depth=2, heads=4, rotary_pos_emb=True)).train()
    return model, (_tokens(),), lambda out, *inputs: out.float().pow(2).mean()


MODELS: dict[str, Callable[[], tuple]] = {
    "bert": bert, "gpt2": gpt2, "llama": llama, "qwen2": qwen2, "mistral": mistral, "t5": t5,
    "whisper": whisper, "vit": vit, "unet2d": unet2d, "unet2d_condition": unet2d_condition,
    "x_transformers": x_transformer,
}


# --- one (model, chip) in this process ---------------------------------------------------------------------
def _moved(value: Any, device: torch.device) -> Any:
    return value.to(device) if isinstance(value, torch.Tensor) else value


def _step(name: str, device: torch.device) -> dict[str, Any]:
    model, inputs, loss_fn = MODELS[name]()
    model = model.to(device)
    inputs = tuple(_moved(i, device) for i in inputs)
    # SGD: the updated parameters are then a linear function of the gradients, so "equals CPU" is not
    # blurred by Adam's first step, which turns a 1e-9 gradient into a full-size update of either sign
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    torch.manual_seed(1)
    loss = loss_fn(model(*inputs), *inputs)
    loss.backward()
    grads = {k: p.grad.detach().cpu().clone() for k, p in model.named_parameters() if p.grad is not None}
    opt.step()
    params = {k: p.detach().cpu().clone() for k, p in model.named_parameters()}
    return {"loss": loss.detach().cpu(), "grads": grads, "params": params}


def _compare(got: dict[str, Any], expected: dict[str, Any]) -> tuple[bool, bool, str]:
    """(close, bitwise, first difference)."""
    bitwise = True
    for part in ("loss", "grads", "params"):
        a, b = got[part], expected[part]
        pairs = [(part, a, b)] if part == "loss" else [(f"{part}[{k}]", a.get(k), b[k]) for k in b]
        for where, x, y in pairs:
            if x is None:
                return False, False, f"{where} missing"
            bitwise = bitwise and torch.equal(x, y)
            try:
                torch.testing.assert_close(x, y, rtol=1e-4, atol=1e-5)
            except AssertionError as exc:
                return False, False, f"{where}: {str(exc).splitlines()[0]}"
    return True, bitwise, ""


def run_one(name: str, chip: str) -> dict[str, Any]:
    """The row of (model, chip), in this process (FL_DEVICE must be `chip`)."""
    import warnings

    import torch_fl
    from torch_fl.analysis.coverage import coverage
    from torch_fl.analysis.model import ModelSpec

    warnings.simplefilter("ignore")
    row: dict[str, Any] = {"model": name, "chip": chip}
    expected = _step(name, torch.device("cpu"))
    start = time.perf_counter()
    try:
        got = _step(name, torch_fl.device())
        row["step_runs"], row["step_error"] = True, ""
    except Exception as exc:  # the chip's own error is a result here, not a crash of the script
        got = None
        row["step_runs"], row["step_error"] = False, f"{type(exc).__name__}: {str(exc).splitlines()[0][:200]}"
    row["step_seconds"] = round(time.perf_counter() - start, 2)
    if got is not None:
        row["equals_cpu"], row["bitwise"], row["difference"] = _compare(got, expected)
    else:
        row["equals_cpu"], row["bitwise"], row["difference"] = False, False, ""
    model, inputs, loss_fn = MODELS[name]()
    try:
        report = coverage(ModelSpec(name, model, inputs, loss_fn), chip, train=True)
        unsupported = report.data["summary"]["unsupported_calls"]
        row["coverage"] = "would not run" if unsupported else "runs"
        row["native_share"] = report.data["summary"].get("native_calls_share")
    except Exception as exc:
        row["coverage"] = f"could not trace: {type(exc).__name__}: {str(exc).splitlines()[0][:160]}"
        row["native_share"] = None
    row["coverage_agrees"] = row["coverage"] in ("runs", "would not run") and \
        (row["coverage"] == "runs") == row["step_runs"]
    return row


def _child(name: str, chip: str) -> dict[str, Any]:
    env = {**os.environ, "FL_DEVICE": chip, "PYTHONPATH": str(ROOT / "src")}
    run = subprocess.run([sys.executable, __file__, "--one", name, "--chips", chip], env=env,
                         capture_output=True, text=True, timeout=900)
    for line in run.stdout.splitlines():
        if line.startswith("ROW "):
            return json.loads(line[4:])
    tail = (run.stderr or run.stdout).strip().splitlines()[-1:] or ["no output"]
    return {"model": name, "chip": chip, "step_runs": False, "step_error": f"process failed: {tail[0][:200]}",
            "equals_cpu": False, "bitwise": False, "difference": "", "coverage": "not run",
            "coverage_agrees": False, "native_share": None, "step_seconds": None}


def table(rows: list[dict[str, Any]]) -> str:
    lines = ["| model | chip | step runs | equals CPU | coverage verdict | agrees |",
             "| --- | --- | --- | --- | --- | --- |"]
    for r in rows:
        equal = ("bitwise" if r["bitwise"] else "yes (rtol 1e-4)") if r["equals_cpu"] else \
            ("no: " + r["difference"] if r["step_runs"] else "-")
        runs = "yes" if r["step_runs"] else f"no: {r['step_error']}"
        share = f" ({r['native_share']:.0%} native)" if isinstance(r.get("native_share"), float) else ""
        lines.append(f"| {r['model']} | {r['chip']} | {runs} | {equal} | {r['coverage']}{share} | "
                     f"{'yes' if r['coverage_agrees'] else 'NO'} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", default=",".join(MODELS), help="comma-separated names")
    parser.add_argument("--chips", default="emu:cuda,emu:mps", help="comma-separated emulated chips")
    parser.add_argument("--json", help="also write the rows as JSON here")
    parser.add_argument("--one", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.one:
        print("ROW " + json.dumps(run_one(args.one, args.chips)))
        return 0
    rows = []
    for name in args.models.split(","):
        for chip in args.chips.split(","):
            rows.append(_child(name, chip))
            print(f"{name} on {chip}: step {'runs' if rows[-1]['step_runs'] else 'fails'}, "
                  f"coverage {rows[-1]['coverage']}", file=sys.stderr)
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=2) + "\n", encoding="utf-8")
    print(table(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
