"""torch.compile on an emulated chip (emu:cuda): eager and aot_eager trace through the emulated device,
tensors made inside the compiled region included (torch.arange(n, device=x.device), as every HF rotary
embedding does); Inductor stops with torch-fl's error instead of compiling for the host."""

from __future__ import annotations

import pytest
import torch

import torch_fl
from torch_fl.routing import emu
from torch_fl.routing.emu import compiled


class Rotary(torch.nn.Module):
    """Tensors made on x.device inside forward, times a buffer (an HF rotary embedding in miniature)."""

    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("inv_freq", 1.0 / (10000 ** (torch.arange(0, 8, 2, dtype=torch.float32) / 8)))
        self.proj = torch.nn.Linear(8, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        t = torch.arange(x.shape[1], device=x.device, dtype=torch.float32)
        freqs = torch.outer(t, self.inv_freq)
        emb = torch.cat((freqs, freqs), dim=-1)
        bias = torch.ones(x.shape[-1], device=x.device) * 0.5 + torch.zeros((), device=x.device)
        mask = torch.full((x.shape[1], x.shape[1]), float("-inf"), device=x.device).triu(1)
        y = self.proj(x) * emb.cos() + emb.sin() + bias
        return y + mask.softmax(-1) @ y


@pytest.fixture
def cuda():
    torch._dynamo.reset()
    with torch_fl.emulate("cuda") as activation:
        yield activation.device
    torch._dynamo.reset()


@pytest.mark.parametrize("backend", ["eager", "aot_eager"])
def test_tensors_made_inside_the_compiled_region(cuda, backend):
    torch.manual_seed(0)
    model = Rotary().to(cuda)
    x = torch.randn(2, 5, 8, device=cuda, requires_grad=True)
    expected = model(x)
    expected.sum().backward()
    grads = [p.grad.cpu() for p in model.parameters()] + [x.grad.cpu()]
    model.zero_grad()
    x.grad = None
    out = torch.compile(model, backend=backend)(x)
    assert out.device == cuda and isinstance(out, emu.EmuTensor)
    torch.testing.assert_close(out.cpu(), expected.cpu())
    out.sum().backward()
    torch.testing.assert_close([p.grad.cpu() for p in model.parameters()] + [x.grad.cpu()], grads)
    assert all(p.grad.device == cuda for p in model.parameters())


@pytest.mark.parametrize("backend", ["eager", "aot_eager"])
def test_hf_llama_rotary_embedding(cuda, backend):
    llama = pytest.importorskip("transformers.models.llama.modeling_llama")
    config = llama.LlamaConfig(hidden_size=16, num_attention_heads=2, num_key_value_heads=2,
                               max_position_embeddings=32, intermediate_size=32, num_hidden_layers=1)
    rotary = llama.LlamaRotaryEmbedding(config).to(cuda)
    x = torch.randn(1, 6, 16, device=cuda)
    positions = torch.arange(6, device=cuda)[None]
    cos, sin = rotary(x, positions)
    ccos, csin = torch.compile(rotary, backend=backend)(x, positions)
    assert ccos.device == cuda and csin.device == cuda
    torch.testing.assert_close((ccos.cpu(), csin.cpu()), (cos.cpu(), sin.cpu()))


def test_a_factory_only_region_returns_device_tensors(cuda):
    @torch.compile(backend="aot_eager")
    def make(n: int) -> torch.Tensor:
        return torch.arange(n, device=cuda) * 2 + torch.ones(n, device=cuda, dtype=torch.int64)

    out = make(4)
    assert out.device == cuda
    assert out.cpu().tolist() == [1, 3, 5, 7]


def test_the_chips_routes_are_checked_while_tracing():
    # minimal has no complex dtype: the compiled region stops as the uncompiled one does
    torch._dynamo.reset()
    with torch_fl.emulate("minimal") as activation:
        x = torch.randn(8, device=activation.device)
        with pytest.raises(torch_fl.errors.UnsupportedOperatorError, match="complex64"):
            torch.compile(lambda t: torch.fft.rfft(t * torch.ones(8, device=t.device)).abs(),
                          backend="aot_eager")(x)
    torch._dynamo.reset()


@pytest.mark.parametrize("how", ["default", "string", "mode", "dynamo.optimize", "compile_fx"])
def test_inductor_stops_with_torch_fls_error(cuda, how):
    """Every way to Inductor, torch.compile's and the ones around it (dynamo.optimize and passing
    compile_fx as the backend once compiled host code for the emulated chip in silence)."""
    from torch._inductor.compile_fx import compile_fx

    model = Rotary().to(cuda)
    x = torch.randn(2, 5, 8, device=cuda)
    compile_ = {"default": lambda: torch.compile(model), "string": lambda: torch.compile(model, backend="inductor"),
                "mode": lambda: torch.compile(model, mode="max-autotune-no-cudagraphs"),
                "dynamo.optimize": lambda: torch._dynamo.optimize("inductor")(model),
                "compile_fx": lambda: torch.compile(model, backend=compile_fx)}[how]
    torch._dynamo.reset()
    with pytest.raises(Exception, match=r"torch-fl: Inductor cannot compile for the emulated device emu:0 "
                                        r"\(chip 'cuda'\): it would generate host \(CPU\) code") as info:
        compile_()(x)
    assert 'backend="aot_eager"' in str(info.value)


def test_inductor_guard_leaves_host_graphs_alone(cuda):
    gm = torch.fx.symbolic_trace(torch.nn.Linear(2, 2))
    assert compiled.on_device(gm, [torch.randn(2, 2)]) is None
    assert compiled.on_device(gm, [torch.randn(2, 2, device=cuda)]) == cuda



_AUTOCAST_COMPILED = """
import torch, torch_fl, torch._dynamo.testing
d = torch_fl.device()

def matmul_in_autocast(x, y):
    with torch.musa.amp.autocast(enabled=True):
        return torch.matmul(x, y)

x = torch.randn(8, 8, device=d, requires_grad=True)
y = torch.randn(8, 8, device=d, requires_grad=True)
eager = matmul_in_autocast(x, y)
counter = torch._dynamo.testing.CompileCounter()
compiled = torch._dynamo.optimize(counter)(matmul_in_autocast)(x, y)
print("SAME", compiled.dtype, eager.dtype, compiled.device, torch.equal(compiled.cpu(), eager.cpu()))
"""


@pytest.mark.slow  # (a process of its own: torch.musa exists only where the slot is named for the chip)
def test_dynamo_never_compiles_the_emulators_own_frames():
    # torch_musa's tests/unittest/dynamo/test_ctx_manager.py: the chip's autocast context inside a compiled
    # function. Dynamo runs what it cannot trace eagerly, and with its frame hook still on it compiled the
    # emulator's dispatch frames too, resuming one with a half-made EmuTensor ("no attribute '_index'")
    import os
    import subprocess
    import sys

    env = {**{k: v for k, v in os.environ.items() if not k.startswith("FL_")}, "FL_DEVICE": "emu:musa"}
    run = subprocess.run([sys.executable, "-c", _AUTOCAST_COMPILED], env=env, capture_output=True, text=True,
                         timeout=300, check=False)
    assert run.returncode == 0, run.stderr[-3000:]
    assert "SAME torch.float16 torch.float16 musa:0 True" in run.stdout
