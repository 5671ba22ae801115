"""Public models nobody here wrote, on emulated chips: does a training step run, does it equal the CPU,
and does `torchfl coverage` agree with what the emulator did?

Every model is a tiny random-weight configuration of a public implementation installed from PyPI
(transformers, diffusers, x-transformers). Each name is also a model entry point for the tools:

    torchfl coverage scripts/model_zoo.py:gpt2 --device emu:cuda --train

Run (writes the Markdown table of docs/analysis.md to stdout, a row per model and chip):

    python scripts/model_zoo.py                      # the first 11 models, emu:cuda and emu:mps
    python scripts/model_zoo.py --models gpt2,t5 --chips emu:cuda --json zoo.json
    python scripts/model_zoo.py --set held-out --json held-out.json   # issue 29's judge, ~15 min on 2 cores
    python scripts/model_zoo.py --models opt,convnext --chips emu:npu --workflows   # two of them, ~40 s

Each (model, chip) runs in a fresh process (the emulated chip is fixed per process, as FL_DEVICE is):
"step runs" is one forward + loss + backward + SGD (momentum) step on the emulated device; "equals CPU" compares
the loss, every gradient and every updated parameter with the same step on the plain CPU (rtol 1e-4,
atol 1e-5; "bitwise" when they are identical); "coverage agrees" compares `torchfl coverage --train`'s
verdict (would it run?) with what the step did, and that the op a failed step stopped at is one coverage
calls unsupported.

The held-out set (issue 29: Falcon, Phi-3, Gemma 2, GPT-NeoX, OPT, BART, DeBERTa-v2, Swin, CLIP, Wav2Vec2,
Mamba, Mixtral, diffusers' AutoencoderKL, ConvNeXt on emu:cuda, emu:npu, emu:mlu, emu:xpu) adds, with
--workflows, the workflows around a step: (b) `save_pretrained` of the model on the chip -> `from_pretrained`
-> `.to(chip)` -> greedy `generate()` (6 new tokens; the models without generate(): a forward pass of the
reloaded model), the weights bit for bit and the output against the original model's on the CPU; (c)
transformers' `Trainer` (2 SGD-with-momentum steps, a checkpoint after each, `use_fl_device()`) and a fresh
model resumed from checkpoint-1, both on the CPU (`use_cpu=True`) and on the chip: the chip's uninterrupted
and resumed runs must end on the CPU's weights. A step that equals the CPU within tolerance but not bit for
bit is compared again with the CPU on the math-path attention (`sdpa_kernel(MATH)`).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
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


# --- held out (issue 29): 14 architectures nobody here had used, judged with the workflows around a step ---
_IDS = dict(pad_token_id=0, bos_token_id=1, eos_token_id=2)


def falcon() -> tuple:
    model = _hf("FalconConfig", "FalconForCausalLM", vocab_size=VOCAB, hidden_size=32, num_hidden_layers=2,
                num_attention_heads=4, max_position_embeddings=64, **_IDS)
    return model, (_tokens(),), _logits_loss


def phi3() -> tuple:
    model = _hf("Phi3Config", "Phi3ForCausalLM", **_DECODER, **_IDS)
    return model, (_tokens(),), _logits_loss


def gemma2() -> tuple:
    model = _hf("Gemma2Config", "Gemma2ForCausalLM", **_DECODER, head_dim=8, sliding_window=8, **_IDS)
    return model, (_tokens(),), _logits_loss


def gpt_neox() -> tuple:
    model = _hf("GPTNeoXConfig", "GPTNeoXForCausalLM", vocab_size=VOCAB, hidden_size=32, num_hidden_layers=2,
                num_attention_heads=4, intermediate_size=64, max_position_embeddings=64, **_IDS)
    return model, (_tokens(),), _logits_loss


def opt() -> tuple:
    model = _hf("OPTConfig", "OPTForCausalLM", vocab_size=VOCAB, hidden_size=32, num_hidden_layers=2,
                ffn_dim=64, num_attention_heads=4, max_position_embeddings=64, word_embed_proj_dim=32, **_IDS)
    return model, (_tokens(),), _logits_loss


def bart() -> tuple:
    model = _hf("BartConfig", "BartForConditionalGeneration", vocab_size=VOCAB, d_model=32, encoder_layers=2,
                decoder_layers=2, encoder_attention_heads=4, decoder_attention_heads=4, encoder_ffn_dim=64,
                decoder_ffn_dim=64, max_position_embeddings=64, decoder_start_token_id=2, forced_eos_token_id=None,
                **_IDS)
    return _Keywords(model, "input_ids", "decoder_input_ids"), (_tokens(), _tokens(length=6)), _logits_loss


def deberta_v2() -> tuple:
    model = _hf("DebertaV2Config", "DebertaV2ForMaskedLM", vocab_size=VOCAB, hidden_size=32, num_hidden_layers=2,
                num_attention_heads=4, intermediate_size=64, max_position_embeddings=64, relative_attention=True,
                position_buckets=16, pos_att_type=["p2c", "c2p"], pad_token_id=0)
    return model, (_tokens(),), _logits_loss


def swin() -> tuple:
    model = _hf("SwinConfig", "SwinForImageClassification", image_size=16, patch_size=2, num_channels=3,
                embed_dim=16, depths=[1, 1], num_heads=[2, 4], window_size=4, num_labels=5)
    return model, (torch.randn(2, 3, 16, 16),), _logits_loss


def _clip_loss(output: Any, *inputs: Any) -> torch.Tensor:
    return output.logits_per_image.float().pow(2).mean() + output.text_embeds.float().pow(2).mean()


def clip() -> tuple:
    text = dict(vocab_size=VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                max_position_embeddings=16, **_IDS)
    vision = dict(image_size=16, patch_size=4, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                  num_attention_heads=4)
    model = _hf("CLIPConfig", "CLIPModel", text_config=text, vision_config=vision, projection_dim=16)
    inputs = (_tokens(), torch.randn(2, 3, 16, 16))
    return _Keywords(model, "input_ids", "pixel_values"), inputs, _clip_loss


def wav2vec2() -> tuple:
    # no SpecAugment masking (mask_time_prob=0): it draws with numpy, which neither side seeds the same
    model = _hf("Wav2Vec2Config", "Wav2Vec2ForCTC", vocab_size=32, hidden_size=32, num_hidden_layers=2,
                num_attention_heads=4, intermediate_size=64, conv_dim=(16, 16), conv_stride=(5, 2),
                conv_kernel=(10, 3), num_conv_pos_embeddings=16, num_conv_pos_embedding_groups=4,
                mask_time_prob=0.0, ctc_loss_reduction="mean", **_IDS)
    return model, (torch.randn(2, 400),), _logits_loss


def mamba() -> tuple:
    model = _hf("MambaConfig", "MambaForCausalLM", vocab_size=VOCAB, hidden_size=32, state_size=8,
                num_hidden_layers=2, expand=2, conv_kernel=4, time_step_rank=4, **_IDS)
    return model, (_tokens(),), _logits_loss


def mixtral() -> tuple:
    model = _hf("MixtralConfig", "MixtralForCausalLM", **_DECODER, num_local_experts=4, num_experts_per_tok=2,
                **_IDS)
    return model, (_tokens(),), _logits_loss


def autoencoder_kl() -> tuple:
    from diffusers import AutoencoderKL

    torch.manual_seed(0)
    model = AutoencoderKL(in_channels=3, out_channels=3, latent_channels=4, layers_per_block=1,
                          block_out_channels=(16, 32), norm_num_groups=8, sample_size=16,
                          down_block_types=("DownEncoderBlock2D",) * 2,
                          up_block_types=("UpDecoderBlock2D",) * 2).train()
    return model, (torch.randn(2, 3, 16, 16),), _sample_loss


def convnext() -> tuple:
    model = _hf("ConvNextConfig", "ConvNextForImageClassification", num_channels=3, hidden_sizes=[16, 32],
                depths=[1, 1], num_stages=2, image_size=16, patch_size=4, num_labels=5)
    return model, (torch.randn(2, 3, 16, 16),), _logits_loss


ORIGINAL = ("bert", "gpt2", "llama", "qwen2", "mistral", "t5", "whisper", "vit", "unet2d", "unet2d_condition",
            "x_transformers")
HELD_OUT = ("falcon", "phi3", "gemma2", "gpt_neox", "opt", "bart", "deberta_v2", "swin", "clip", "wav2vec2",
            "mamba", "mixtral", "autoencoder_kl", "convnext")
HELD_OUT_CHIPS = "emu:cuda,emu:npu,emu:mlu,emu:xpu"
MODELS: dict[str, Callable[[], tuple]] = {
    "bert": bert, "gpt2": gpt2, "llama": llama, "qwen2": qwen2, "mistral": mistral, "t5": t5,
    "whisper": whisper, "vit": vit, "unet2d": unet2d, "unet2d_condition": unet2d_condition,
    "x_transformers": x_transformer,
    "falcon": falcon, "phi3": phi3, "gemma2": gemma2, "gpt_neox": gpt_neox, "opt": opt, "bart": bart,
    "deberta_v2": deberta_v2, "swin": swin, "clip": clip, "wav2vec2": wav2vec2, "mamba": mamba,
    "mixtral": mixtral, "autoencoder_kl": autoencoder_kl, "convnext": convnext,
}
# decoders (and BART) are judged by greedy generate() after the round trip; the others have no generate(),
# so by a forward pass of the reloaded model
GENERATES = {"falcon", "phi3", "gemma2", "gpt_neox", "opt", "bart", "mamba", "mixtral"}


# --- one (model, chip) in this process ---------------------------------------------------------------------
def _moved(value: Any, device: torch.device) -> Any:
    return value.to(device) if isinstance(value, torch.Tensor) else value


def _step(name: str, device: torch.device) -> dict[str, Any]:
    model, inputs, loss_fn = MODELS[name]()
    # without dropout and stochastic depth: the chip draws those masks from its own generator, as a real
    # one does, while the CPU reference draws them from the host's, interleaved with host draws (wav2vec2's
    # layerdrop), so no seeding makes the two streams one; the device generators are checked on their own
    # (tests/routing/test_emu_seeds.py)
    model = _without_dropout(model).to(device)
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


# --- the workflows around a step (--workflows): save -> load -> generate, a Trainer checkpoint and resume -----
def _unwrapped(model: torch.nn.Module) -> torch.nn.Module:
    return model.model if isinstance(model, _Keywords) else model


def _main_output(output: Any) -> torch.Tensor:
    for field in ("logits", "sample", "logits_per_image"):
        if getattr(output, field, None) is not None:
            return getattr(output, field)
    return output[0]


def _generate(model: torch.nn.Module, ids: torch.Tensor) -> torch.Tensor:
    return model.generate(ids, max_new_tokens=6, do_sample=False, pad_token_id=0)


def round_trip(name: str, device: torch.device, workdir: Path) -> dict[str, Any]:
    """``save_pretrained`` on the chip -> ``from_pretrained`` -> ``.to(chip)`` -> greedy ``generate()`` (a forward
    pass for models without generate), against the same call of the original model on the CPU."""
    model, inputs, _ = MODELS[name]()
    model.eval()
    host = _unwrapped(model)
    ids = _tokens(batch=1, length=6)
    with torch.no_grad():
        expected = _generate(host, ids) if name in GENERATES else _main_output(model(*inputs)).clone()
    state = {k: v.clone() for k, v in host.state_dict().items()}
    host.to(device)
    host.save_pretrained(workdir / "saved")                       # the chip's tensors, written by safetensors
    again = type(host).from_pretrained(workdir / "saved").to(device).eval()
    loaded = again.state_dict()
    weights = all(torch.equal(loaded[k].cpu(), v) for k, v in state.items())
    with torch.no_grad():
        if name in GENERATES:
            got = _generate(again, ids.to(device)).cpu()
            equal, detail = torch.equal(got, expected), f"{got.shape[-1] - ids.shape[-1]} tokens"
            bitwise = equal
        else:
            rewrapped = _Keywords(again, *model.names) if isinstance(model, _Keywords) else again
            got = _main_output(rewrapped(*(_moved(i, device) for i in inputs))).cpu()
            bitwise = torch.equal(got, expected)
            equal, detail = torch.allclose(got, expected, rtol=1e-4, atol=1e-5), "forward"
    on_chip = all(t.device == device for t in again.state_dict().values())
    return {"ok": weights and equal and on_chip, "weights_bitwise": weights, "output_equal": equal,
            "output_bitwise": bitwise, "on_chip": on_chip, "how": "generate" if name in GENERATES else "forward",
            "detail": detail}


def _collate(extra: dict[str, Any]) -> Callable[[list[dict[str, Any]]], dict[str, Any]]:
    def collate(items: list[dict[str, Any]]) -> dict[str, Any]:
        return {**{k: torch.stack([item[k] for item in items]) for k in items[0]}, **extra}
    return collate


class _LossOf(torch.nn.Module):
    """A model without a loss of its own (diffusers' AutoencoderKL) as Trainer takes one: a dict with "loss"."""

    def __init__(self, model: torch.nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, sample: torch.Tensor) -> dict[str, torch.Tensor]:
        return {"loss": self.model(sample).sample.float().pow(2).mean()}


def _trainer_data(name: str) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Four samples with labels, as each architecture's HF forward takes them, and the collator's extras."""
    g = torch.Generator().manual_seed(3)
    rows: list[dict[str, Any]] = []
    for _ in range(4):
        ids = torch.randint(3, VOCAB, (12,), generator=g)
        image = torch.randn(3, 16, 16, generator=g)
        label = torch.randint(0, 5, (), generator=g)
        rows.append({
            "swin": {"pixel_values": image, "labels": label}, "convnext": {"pixel_values": image, "labels": label},
            "clip": {"input_ids": ids, "pixel_values": image},
            "wav2vec2": {"input_values": torch.randn(400, generator=g),
                         "labels": torch.randint(3, 32, (4,), generator=g)},
            "autoencoder_kl": {"sample": image},
        }.get(name, {"input_ids": ids, "labels": ids}))
    return rows, ({"return_loss": True} if name == "clip" else {})


def _trainer_model(name: str) -> torch.nn.Module:
    model = _without_dropout(_unwrapped(MODELS[name]()[0]))
    return _LossOf(model) if name == "autoencoder_kl" else model


def _without_dropout(model: torch.nn.Module) -> torch.nn.Module:
    """`model` with every dropout probability 0 (nn.Dropout modules, HF's float `*dropout*` attributes, and
    DropPath's `drop_prob`).

    The chip draws its dropout masks from its own generator, as a real one does (routing/emu/rng.py), and the
    Trainer's sampler draws from the host's between seeding and the first step, so the CPU run's masks and the
    chip's cannot be the same stream; the step check (a) seeds both generators alike instead."""
    for module in model.modules():
        if isinstance(module, torch.nn.modules.dropout._DropoutNd):
            module.p = 0.0
        for key, value in vars(module).items():
            if any(word in key for word in ("dropout", "drop_prob", "drop_path")) and isinstance(value, float):
                setattr(module, key, 0.0)  # (drop_prob: timm's and HF's DropPath, stochastic depth)
    return model


def trainer_resume(name: str, device: torch.device, workdir: Path) -> dict[str, Any]:
    """transformers' Trainer: 2 SGD (momentum) steps with a checkpoint after each, then a fresh model and Trainer
    resumed from the first checkpoint; on the CPU (``use_cpu=True``) first, then on the chip (``use_fl_device``),
    and the chip's uninterrupted and resumed runs must end on the CPU's weights."""
    from accelerate.state import AcceleratorState
    from transformers import Trainer, TrainingArguments

    from torch_fl.integrations.huggingface import use_fl_device

    rows, extra = _trainer_data(name)

    def run(out: Path, resume: bool, cpu: bool) -> tuple[dict[str, torch.Tensor], float, str]:
        # SGD: the updates are linear in the gradients, so a 1e-9 gradient difference stays one (see _step)
        args = TrainingArguments(output_dir=str(out), per_device_train_batch_size=2, max_steps=2,
                                 save_strategy="steps", save_steps=1, optim="sgd", optim_args="momentum=0.9",
                                 learning_rate=0.05, report_to=[], logging_strategy="no", disable_tqdm=True,
                                 dataloader_pin_memory=False, remove_unused_columns=False, seed=0, use_cpu=cpu)
        model = _trainer_model(name)
        trainer = Trainer(model=model, args=args, train_dataset=rows, data_collator=_collate(extra))
        result = trainer.train(resume_from_checkpoint=str(out / "checkpoint-1") if resume else None)
        where = str(next(model.parameters()).device)
        return {k: p.detach().cpu().clone() for k, p in model.named_parameters()}, result.training_loss, where

    cpu_straight, _, _ = run(workdir / "cpu", False, True)
    cpu_resumed, _, _ = run(workdir / "cpu", True, True)
    AcceleratorState._reset_state(reset_partial_state=True)  # accelerate keeps the first device it chose
    use_fl_device(device)
    straight, loss, where = run(workdir / "chip", False, False)
    checkpoints = sorted(p.name for p in (workdir / "chip").glob("checkpoint-*"))
    resumed, _, where_resumed = run(workdir / "chip", True, False)

    def same(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> tuple[bool, bool]:
        return (all(torch.allclose(a[k], v, rtol=1e-4, atol=1e-5) for k, v in b.items()),
                all(torch.equal(a[k], v) for k, v in b.items()))

    (straight_close, straight_bitwise), (resumed_close, resumed_bitwise) = \
        same(straight, cpu_straight), same(resumed, cpu_resumed)
    on_chip = where == where_resumed == str(device)
    return {"ok": straight_close and resumed_close and on_chip and math.isfinite(loss),
            "straight_close": straight_close, "resumed_close": resumed_close,
            "bitwise": straight_bitwise and resumed_bitwise, "device": where, "checkpoints": checkpoints,
            "loss": round(loss, 4),
            # transformers' own property, on the CPU: does the resumed run end where the uninterrupted one does?
            "cpu_resume_is_straight": same(cpu_resumed, cpu_straight)[1]}


def _workflow(row: dict[str, Any], key: str, fn: Callable[..., dict[str, Any]], name: str,
              device: torch.device) -> None:
    import tempfile

    start = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix=f"zoo-{name}-") as tmp:
        try:
            row[key] = fn(name, device, Path(tmp))
        except Exception as exc:
            row[key] = {"ok": False, "error": f"{type(exc).__name__}: {(str(exc).splitlines() or [''])[0][:200]}"}
    row[key]["seconds"] = round(time.perf_counter() - start, 2)


def run_one(name: str, chip: str, workflows: bool = False) -> dict[str, Any]:
    """The row of (model, chip), in this process (FL_DEVICE must be `chip`); with ``workflows`` also the
    save/load/generate round trip and the Trainer checkpoint + resume."""
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
    row["bitwise_math_attention"] = None
    if row["equals_cpu"] and not row["bitwise"]:
        # is the difference the attention kernel? (a chip without a fused kernel for these inputs takes the
        # math path: the CPU on the math path is then bit for bit what the emulated chip computed)
        from torch.nn.attention import SDPBackend, sdpa_kernel

        with sdpa_kernel([SDPBackend.MATH]):
            row["bitwise_math_attention"] = _compare(got, _step(name, torch.device("cpu")))[1]
    model, inputs, loss_fn = MODELS[name]()
    start = time.perf_counter()
    unsupported_ops: list[str] = []
    try:
        report = coverage(ModelSpec(name, model, inputs, loss_fn), chip, train=True)
        unsupported = report.data["summary"]["unsupported_calls"]
        unsupported_ops = sorted({op["op"] for op in report.data["ops"] if op["route"] == "unsupported"})
        row["coverage"] = "would not run" if unsupported else "runs"
        row["native_share"] = report.data["summary"].get("native_calls_share")
    except Exception as exc:
        row["coverage"] = f"could not trace: {type(exc).__name__}: {str(exc).splitlines()[0][:160]}"
        row["native_share"] = None
    row["coverage_seconds"] = round(time.perf_counter() - start, 2)
    row["unsupported_ops"] = unsupported_ops
    # op by op: the op the step stopped at is one coverage calls unsupported (none called fine that failed)
    stopped = re.search(r"(aten::[\w.]+|npu::[\w.]+) is not supported", row["step_error"])
    named = stopped is None or any(stopped.group(1).startswith(op.split(".")[0]) for op in unsupported_ops)
    row["coverage_agrees"] = row["coverage"] in ("runs", "would not run") and \
        (row["coverage"] == "runs") == row["step_runs"] and named
    if workflows:
        device = torch_fl.device()
        _workflow(row, "round_trip", round_trip, name, device)
        _workflow(row, "trainer", trainer_resume, name, device)
    return row


def _child(name: str, chip: str, workflows: bool = False) -> dict[str, Any]:
    env = {**os.environ, "FL_DEVICE": chip, "PYTHONPATH": str(ROOT / "src"), "HF_HUB_OFFLINE": "1",
           "TOKENIZERS_PARALLELISM": "false"}
    command = [sys.executable, __file__, "--one", name, "--chips", chip] + (["--workflows"] if workflows else [])
    run = subprocess.run(command, env=env, capture_output=True, text=True, timeout=900)
    for line in run.stdout.splitlines():
        if line.startswith("ROW "):
            return json.loads(line[4:])
    tail = (run.stderr or run.stdout).strip().splitlines()[-1:] or ["no output"]
    return {"model": name, "chip": chip, "step_runs": False, "step_error": f"process failed: {tail[0][:200]}",
            "equals_cpu": False, "bitwise": False, "difference": "", "coverage": "not run",
            "coverage_agrees": False, "native_share": None, "step_seconds": None, "coverage_seconds": None,
            "unsupported_ops": []}


def table(rows: list[dict[str, Any]]) -> str:
    lines = ["| model | chip | step runs | equals CPU | coverage verdict | agrees |",
             "| --- | --- | --- | --- | --- | --- |"]
    for r in rows:
        close = "yes (rtol 1e-4; bitwise vs the CPU's math-path SDPA)" if r.get("bitwise_math_attention") else \
            "yes (rtol 1e-4)"
        equal = ("bitwise" if r["bitwise"] else close) if r["equals_cpu"] else \
            ("no: " + r["difference"] if r["step_runs"] else "-")
        runs = "yes" if r["step_runs"] else f"no: {r['step_error']}"
        share = f" ({r['native_share']:.0%} native)" if isinstance(r.get("native_share"), float) else ""
        lines.append(f"| {r['model']} | {r['chip']} | {runs} | {equal} | {r['coverage']}{share} | "
                     f"{'yes' if r['coverage_agrees'] else 'NO'} |")
    return "\n".join(lines)


def _step_cell(r: dict[str, Any]) -> str:
    if not r["step_runs"]:
        return f"no: {_short(r['step_error'])}"
    if not r["equals_cpu"]:
        return f"runs, differs: {r['difference']}"
    if r["bitwise"]:
        return "bitwise"
    return "rtol 1e-4" + ("; bitwise vs the CPU's math-path SDPA" if r.get("bitwise_math_attention") else "")


def _short(text: str, limit: int = 110) -> str:
    return text if len(text) <= limit else text[:limit - 3] + "..."


def _round_trip_cell(r: dict[str, Any]) -> str:
    t = r.get("round_trip") or {}
    if "error" in t or not t:
        return f"no: {_short(t.get('error', 'not run'))}"
    what = "generate" if t["how"] == "generate" else "forward"
    if t["ok"]:
        same = "same tokens" if what == "generate" else ("bitwise" if t["output_bitwise"] else "rtol 1e-4")
        return f"{what}: {same}"
    return (f"{what}: weights {'equal' if t['weights_bitwise'] else 'DIFFER'}, output "
            f"{'equal' if t['output_equal'] else 'DIFFERS'}, {'on the chip' if t['on_chip'] else 'OFF the chip'}")


def _trainer_cell(r: dict[str, Any]) -> str:
    t = r.get("trainer") or {}
    if "error" in t or not t:
        return f"no: {_short(t.get('error', 'not run'))}"
    note = "" if t["cpu_resume_is_straight"] else " (resume != uninterrupted on the CPU too)"
    if t["ok"]:
        return ("bitwise" if t["bitwise"] else "rtol 1e-4") + note
    return (f"uninterrupted {'equal' if t['straight_close'] else 'DIFFERS'}, resumed "
            f"{'equal' if t['resumed_close'] else 'DIFFERS'}, weights on {t['device']}{note}")


def workflow_table(rows: list[dict[str, Any]]) -> str:
    """The held-out judge: (a) step vs CPU, (b) save -> load -> generate, (c) Trainer resume, (d) coverage."""
    lines = ["| model | chip | (a) step vs CPU | (b) save -> load -> generate/forward vs CPU | "
             "(c) Trainer checkpoint + resume | (d) coverage agrees | seconds (a/b/c/d) |",
             "| --- | --- | --- | --- | --- | --- | --- |"]
    for r in rows:
        cover = ("yes" if r["coverage_agrees"] else "NO") + f" ({r['coverage']})"
        secs = "/".join(str(x) if x is not None else "-" for x in (
            r.get("step_seconds"), (r.get("round_trip") or {}).get("seconds"),
            (r.get("trainer") or {}).get("seconds"), r.get("coverage_seconds")))
        lines.append(f"| {r['model']} | {r['chip']} | {_step_cell(r)} | {_round_trip_cell(r)} | "
                     f"{_trainer_cell(r)} | {cover} | {secs} |")
    return "\n".join(lines)


def _progress(i: int, total: int, r: dict[str, Any], seconds: float) -> str:
    parts = [f"[{i}/{total}] {r['model']} on {r['chip']} ({seconds:.0f} s): step {_step_cell(r)[:80]}"]
    if "round_trip" in r:
        parts += [f"round trip {_round_trip_cell(r)[:80]}", f"trainer {_trainer_cell(r)[:80]}"]
    parts.append(f"coverage {'agrees' if r['coverage_agrees'] else 'DISAGREES'} ({r['coverage'][:60]})")
    return "; ".join(parts)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], epilog=__doc__.split("\n\n", 1)[1],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--set", choices=("original", "held-out"), default="original",
                        help="original: the first 11 models on emu:cuda,emu:mps (step + coverage); held-out: the "
                             "14 architectures of issue 29 on emu:cuda,npu,mlu,xpu with --workflows")
    parser.add_argument("--models", help="comma-separated names (default: those of --set)")
    parser.add_argument("--chips", help="comma-separated emulated chips (default: those of --set)")
    parser.add_argument("--workflows", action="store_true",
                        help="also save_pretrained -> from_pretrained -> generate on the chip, and a Trainer run "
                             "with a checkpoint and a resume from it (on by default with --set held-out)")
    parser.add_argument("--json", help="also write the rows as JSON here")
    parser.add_argument("--one", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    held_out = args.set == "held-out"
    workflows = args.workflows or held_out
    chips = args.chips or (HELD_OUT_CHIPS if held_out else "emu:cuda,emu:mps")
    if args.one:
        print("ROW " + json.dumps(run_one(args.one, chips, workflows)))
        return 0
    names = args.models.split(",") if args.models else list(HELD_OUT if held_out else ORIGINAL)
    unknown = [n for n in names if n not in MODELS]
    if unknown:
        parser.error(f"unknown model(s) {', '.join(unknown)}; known: {', '.join(MODELS)}")
    pairs = [(name, chip) for name in names for chip in chips.split(",")]
    rows = []
    for i, (name, chip) in enumerate(pairs, 1):
        start = time.perf_counter()
        rows.append(_child(name, chip, workflows))
        print(_progress(i, len(pairs), rows[-1], time.perf_counter() - start), file=sys.stderr, flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=2) + "\n", encoding="utf-8")
    print(workflow_table(rows) if workflows else table(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
