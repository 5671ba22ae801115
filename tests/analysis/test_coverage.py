"""`torchfl coverage` and the trace under it.

The reference for what the trace records is a real CPU run of the same step under a dispatch mode
written here, independent of torch_fl.analysis.trace: same (op, dtype) pairs, same call counts.
"""

from __future__ import annotations

import copy
import json
from collections import Counter
from pathlib import Path

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from torch_fl.analysis.coverage import coverage
from torch_fl.analysis.model import ModelSpec, load_model
from torch_fl.analysis.trace import MODEL, OPTIMIZER, TraceError, make_optimizer, trace
from torch_fl.cli import main
from torch_fl.description.probe import canonical_op_name
from torch_fl.routing.table import ROUTES

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
EXAMPLE_NAMES = ("gpt", "cnn", "unusual")


def _spec(name: str) -> ModelSpec:
    return load_model(f"{EXAMPLES / name}.py:factory")


def _dtype(args: tuple, kwargs: dict) -> str | None:
    for value in (*args, *kwargs.values()):
        if isinstance(value, (list, tuple)) and value and isinstance(value[0], torch.Tensor):
            value = value[0]
        if isinstance(value, torch.Tensor):
            return str(value.dtype).removeprefix("torch.")
    dtype = kwargs.get("dtype")
    return str(dtype).removeprefix("torch.") if isinstance(dtype, torch.dtype) else None


class _Count(TorchDispatchMode):
    def __init__(self) -> None:
        super().__init__()
        self.calls: Counter[tuple[str, str | None]] = Counter()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        # The profiler's record_function ops (the optimizer step opens one) are instrumentation that
        # runs no kernel on any device; the trace leaves them out by design.
        if func.namespace != "profiler":
            self.calls[canonical_op_name(func), _dtype(args, kwargs)] += 1
        return func(*args, **kwargs)


def _real_run(spec: ModelSpec, train: bool) -> Counter[tuple[str, str | None]]:
    """The step the trace models, computed for real on the CPU."""
    model = copy.deepcopy(spec.model)
    model.train(train)
    optimizer = make_optimizer(model.parameters()) if train else None
    counter = _Count()
    with counter:
        with torch.set_grad_enabled(train):
            output = model(*spec.inputs)
            loss = spec.loss(output) if train else None
        if optimizer is not None:
            loss.backward()
            optimizer.step()
    return counter.calls


# Agreement with a real run ------------------------------------------------------------------------
@pytest.mark.parametrize("train", [False, True], ids=["forward", "train"])
@pytest.mark.parametrize("name", EXAMPLE_NAMES)
def test_coverage_on_cpu_matches_a_real_cpu_run(name: str, train: bool) -> None:
    # No known difference remains: data-dependent ops (nonzero in examples/unusual.py) get a size the
    # fake mode's shape environment tracks, and the optimizer's `step.item()` is computed because fake
    # tensors keep the value of small constants made with torch.tensor.
    spec = _spec(name)
    data = coverage(spec, "cpu", train=train).data
    traced = {(op["op"], op["dtype"]): op["calls"] for op in data["ops"]}
    assert not any(op["via"] for op in data["ops"])  # nothing is translated on the CPU
    real = dict(_real_run(spec, train))
    assert set(traced) == set(real)
    assert traced == real
    assert data["summary"]["calls"] == sum(real.values())
    assert data["summary"]["native_calls_share"] == 1.0 and data["summary"]["native_ops_share"] == 1.0


def test_unusual_ops_are_traced_with_their_modules() -> None:
    records = {(r.op, r.dtype): r for r in trace(_spec("unusual"), train=True)}
    assert records["aten::nonzero.default", "bool"].modules == {"pool": 1}
    assert records["aten::bucketize.Tensor", "float32"].modules == {"bucketed": 1}
    assert records["aten::index_put_.default", "float32"].modules == {"bucketed": 1}
    assert records["aten::_fft_r2c.default", "float32"].modules == {"spectral": 1}
    # Backward ops belong to the module whose forward created them.
    assert records["aten::embedding_dense_backward.default", "float32"].modules == {"bucketed.embed": 1}
    assert records["aten::index_add.default", "float32"].modules == {"pool": 1}
    # The custom autograd.Function is called by the top-level module's own forward.
    assert records["aten::clamp.default", "float32"].modules == {MODEL: 1}
    assert set(records["aten::lerp_.Scalar", "float32"].modules) == {OPTIMIZER}


def test_gpt_attribution_forward_backward_and_optimizer() -> None:
    records = {(r.op, r.dtype): r for r in trace(_spec("gpt"), train=True)}
    attention = "aten::_scaled_dot_product_flash_attention_for_cpu"
    assert records[f"{attention}.default", "float32"].modules == {"blocks.0": 1, "blocks.1": 1}
    assert records[f"{attention}_backward.default", "float32"].modules == {"blocks.0": 1, "blocks.1": 1}
    assert records["aten::gelu_backward.default", "float32"].modules == {"blocks.0.mlp.1": 1,
                                                                          "blocks.1.mlp.1": 1}
    assert records["aten::nll_loss_forward.default", "float32"].modules == {MODEL: 1}
    assert records["aten::addcdiv_.default", "float32"].modules == {OPTIMIZER: 28}  # one per parameter


def test_trace_leaves_the_model_untouched() -> None:
    spec = _spec("cnn")
    before = {k: v.clone() for k, v in spec.model.state_dict().items()}
    params = list(spec.model.parameters())
    spec.model.eval()
    trace(spec, train=True)
    assert not spec.model.training
    assert list(spec.model.parameters()) == params and all(p.grad is None for p in params)
    assert all(torch.equal(before[k], v) for k, v in spec.model.state_dict().items())
    assert all(not m._forward_hooks and not m._forward_pre_hooks for m in spec.model.modules())


def test_a_model_built_on_meta_traces_like_a_real_one() -> None:
    import sys

    sys.path.insert(0, str(EXAMPLES))
    try:
        from gpt import GPT, lm_loss
    finally:
        sys.path.remove(str(EXAMPLES))
    real = _spec("gpt")
    with torch.device("meta"):
        model = GPT()
    meta = ModelSpec("meta-gpt", model, (real.inputs[0].to("meta"),), lm_loss)
    as_tuples = lambda records: [(r.op, r.dtype, r.calls, r.modules) for r in records]  # noqa: E731
    assert as_tuples(trace(meta, train=True)) == as_tuples(trace(real, train=True))


def test_branching_on_values_is_a_trace_error_that_names_the_module() -> None:
    class Branchy(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.gate = torch.nn.Linear(4, 4)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x * 2 if self.gate(x).sum() > 0 else x

    spec = ModelSpec("branchy", torch.nn.Sequential(Branchy()), (torch.randn(2, 4),), None)
    with pytest.raises(TraceError, match=r"forward pass failed in module '0'.*branches on a tensor's values"):
        trace(spec)


def test_amp_traces_in_the_description_autocast_dtype() -> None:
    data = coverage(_spec("cnn"), "cpu", amp=True).data
    assert ("aten::convolution.default", "bfloat16") in {(op["op"], op["dtype"]) for op in data["ops"]}
    assert any("torch.autocast('cpu', dtype=bfloat16)" in note for note in data["notes"])


# Other devices ------------------------------------------------------------------------------------
def test_gpt_on_minimal_translates_and_takes_the_math_attention_path() -> None:
    report = coverage(_spec("gpt"), "emu:minimal", train=True)
    data = report.data
    ops = {(op["op"], op["dtype"]): op for op in data["ops"]}
    translated = [op for op in data["ops"] if op["route"] == "translate" and not op["via"]]
    assert translated and 0 < data["summary"]["native_calls_share"] < 1.0
    assert data["summary"]["routes"]["translate"] == sum(op["calls"] for op in translated)
    inner = [op for op in data["ops"] if op["via"]]
    assert sum(op["calls"] for op in inner) == sum(data["summary"]["in_translations"].values())
    assert ops["aten::_safe_softmax.default", "float32"]["route"] == "translate"
    assert not any("flash_attention" in op for op, _ in ops)
    assert any("ops.fused_attention = false" in note for note in data["notes"])


def test_below_80_percent_native_calls_warns() -> None:
    report = coverage(_spec("gpt"), "emu:minimal", train=True)
    share = report.data["summary"]["native_calls_share"]
    assert share < 0.8
    assert report.warnings[0].startswith(f"only {share:.1%} of calls are native on minimal (below 80%)")
    assert not coverage(_spec("gpt"), "cpu", train=True).warnings


def test_unusual_on_minimal_names_unsupported_and_translated_ops_and_their_modules() -> None:
    report = coverage(_spec("unusual"), "minimal", train=True)
    ops = {(op["op"], op["dtype"]): op for op in report.data["ops"]}
    fft = ops["aten::_fft_c2c.default", "complex64"]
    assert fft["route"] == "unsupported" and fft["modules"] == [{"module": "spectral", "calls": 1}]
    # rfft is native, but its complex64 output does not exist on the chip (as the emulator checks).
    r2c = ops["aten::_fft_r2c.default", "float32"]
    assert r2c["route"] == "unsupported" and "it produces complex64" in r2c["source"]
    # abs has a decomposition, but it computes in complex64, which the chip does not have: the
    # translation is followed down to the prim that cannot run.
    top_abs = next(op for op in report.data["ops"] if op["op"] == "aten::abs.default" and not op["via"])
    assert top_abs["route"] == "translate" and top_abs["verdict"] == "unsupported"
    prim = next(op for op in report.data["ops"] if op["op"] == "prims::abs.default"
                and op["via"] == [{"op": "aten::abs.default", "dtype": "complex64"}])
    assert prim["route"] == "unsupported" and "precision.dtypes: no complex64" in prim["source"]
    bucketize = ops["aten::bucketize.Tensor", "float32"]
    assert bucketize["route"] == "translate" and bucketize["modules"] == [{"module": "bucketed", "calls": 1}]
    assert any("have no route on minimal" in w and "aten::_fft_c2c.default (complex64)" in w
               for w in report.warnings)


def test_cuda_takes_the_math_attention_path_instead_of_the_cpu_kernel() -> None:
    data = coverage(_spec("gpt"), "cuda", train=True).data
    assert not any(op["op"].endswith("_for_cpu.default") for op in data["ops"])
    assert data["summary"]["routes"]["unsupported"] == 0
    assert any("aten::_scaled_dot_product_flash_attention.default" in note for note in data["notes"])


def test_a_vendor_description_file(tmp_path: Path) -> None:
    chip = tmp_path / "mychip.toml"
    chip.write_text('schema = 1\nname = "mychip"\nvendor = "Test"\ndevice_type = "privateuseone"\n'
                    'dispatch_key = "PrivateUse1"\nplugin = "mychip_torch"\n[precision]\n'
                    'dtypes = ["float32", "int64", "bool"]\nautocast_dtype = "float32"\n[ops]\n'
                    'native = ["aten::convolution", "aten::addmm"]\n'
                    'fallback = ["aten::max_pool2d_with_indices"]\n')
    data = coverage(_spec("cnn"), str(chip)).data
    assert data["device"] == "mychip"
    routes = {op["op"]: op["route"] for op in data["ops"]}
    assert routes["aten::convolution.default"] == "native"
    assert routes["aten::max_pool2d_with_indices.default"] == "fallback"


# JSON and charts ----------------------------------------------------------------------------------
def test_json_shape() -> None:
    report = coverage(_spec("cnn"), "emu:minimal", train=True)
    data = report.data
    assert list(data) == ["device", "model", "summary", "ops", "real_run", "on_cpu", "notes"]
    assert data["real_run"] is None
    assert data["device"] == "minimal" and data["model"].endswith("cnn.py:factory")
    summary = data["summary"]
    assert list(summary) == ["native_ops_share", "native_calls_share", "ops", "calls", "routes",
                             "in_translations", "unsupported_calls", "traced_on", "on_cpu_calls",
                             "native_slow_calls", "native_slow"]
    assert list(summary["routes"]) == list(ROUTES) == list(summary["in_translations"])
    top = [op for op in data["ops"] if not op["via"]]
    assert summary["ops"] == len(top) and summary["calls"] == sum(op["calls"] for op in top)
    assert sum(summary["routes"].values()) == summary["calls"]
    assert summary["traced_on"] == "fake tensors" and summary["unsupported_calls"] == 0
    for op in data["ops"]:
        assert list(op) == ["op", "dtype", "route", "source", "calls", "via", "verdict", "modules"]
        assert op["verdict"] in ROUTES and all(list(link) == ["op", "dtype"] for link in op["via"])
        assert op["route"] in ROUTES and op["calls"] == sum(m["calls"] for m in op["modules"])
        assert all(list(m) == ["module", "calls"] for m in op["modules"])
    assert all(isinstance(note, str) for note in data["notes"])
    # what runs on the CPU on the real chip: nothing on minimal (translate-or-error, no vendor fallback)
    assert data["on_cpu"]["ops"] == [] and data["on_cpu"]["calls"] == summary["on_cpu_calls"] == 0
    assert list(data["on_cpu"]) == ["calls", "bytes", "vendor_fallback", "vendor_setting", "ops", "cost"]
    json.dumps(data)  # serialisable as is
    chart = report.sections[1].charts[0]
    assert chart.kind == "stacked-bar" and chart.x == ["features", "classifier", MODEL, OPTIMIZER]
    assert {s["name"] for s in chart.series} <= set(ROUTES)
    assert sum(sum(s["values"]) for s in chart.series) == summary["calls"]


# CLI ----------------------------------------------------------------------------------------------
def test_cli_writes_json_and_exits_0(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from torch_fl.report import set_progress

    out = tmp_path / "cov.json"
    previous = set_progress(True)  # as on a terminal (capsys's stderr is not one)
    try:
        assert main(["coverage", f"{EXAMPLES / 'cnn.py'}:factory", "--device", "emu:minimal", "--train",
                     "--json", str(out)]) == 0
    finally:
        set_progress(previous)
    captured = capsys.readouterr()
    assert "Operator coverage of" in captured.out and "Ops that are not native on minimal" in captured.out
    assert "tracing a training step" in captured.err  # progress goes to stderr
    data = json.loads(out.read_text())
    assert data["device"] == "minimal" and data["summary"]["ops"] == len([op for op in data["ops"] if not op["via"]])


def test_cli_strict_exits_1_on_unsupported_ops(capsys: pytest.CaptureFixture[str]) -> None:
    entry = f"{EXAMPLES / 'unusual.py'}:factory"
    assert main(["coverage", entry, "--device", "emu:minimal"]) == 0
    assert main(["coverage", entry, "--device", "emu:minimal", "--strict"]) == 1
    assert main(["coverage", entry, "--device", "cpu", "--strict"]) == 0


def test_cli_unknown_device_is_an_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["coverage", f"{EXAMPLES / 'cnn.py'}:factory", "--device", "cdua"]) == 2  # bad input
    assert "Did you mean 'cuda'?" in capsys.readouterr().err


# Translation chains, host work, real-run fallback, device fidelity (issue 12) ---------------------
FIXTURES = Path(__file__).resolve().parent / "coverage_fixtures.py"


def _fixture(name: str) -> ModelSpec:
    return load_model(f"{FIXTURES}:{name}")


def test_a_translation_chain_reaches_an_unsupported_op_and_strict_fails() -> None:
    data = coverage(_fixture("empty_like"), "emu:minimal", train=True).data
    top = next(op for op in data["ops"] if op["op"] == "aten::empty_like.default" and not op["via"])
    assert top["route"] == "translate" and top["verdict"] == "unsupported"
    leaf = next(op for op in data["ops"] if op["op"] == "aten::empty_permuted.default")
    assert leaf["route"] == "unsupported" and leaf["modules"] == [{"module": MODEL, "calls": 1}]
    assert leaf["via"] == [{"op": "aten::empty_like.default", "dtype": "float32"}]
    assert data["summary"]["routes"]["unsupported"] == 0 and data["summary"]["unsupported_calls"] == 1
    entry = f"{FIXTURES}:empty_like"
    assert main(["coverage", entry, "--device", "emu:minimal", "--strict"]) == 1
    assert main(["coverage", entry, "--device", "emu:minimal"]) == 0


def test_sub_ops_of_translations_are_counted_as_the_router_counts_them() -> None:
    # The route log of a real emulated step of this model (tests/analysis/test_coverage_agreement.py):
    # transpose 73 = 28 called by the model + 45 inside the translation of t.
    data = coverage(_spec("gpt"), "emu:minimal", train=True).data
    calls = Counter()
    for op in data["ops"]:
        if op["route"] == "translate":
            calls[op["op"], op["dtype"]] += op["calls"]
    assert calls["aten::transpose.int", "float32"] == 73
    assert calls["aten::new_full.default", "float32"] == 28  # AdamW's lerp_ translates into new_full
    assert calls["aten::all.dim", "bool"] == 2  # _safe_softmax's translation
    via_t = next(op for op in data["ops"] if op["op"] == "aten::transpose.int" and op["via"])
    assert via_t["via"] == [{"op": "aten::t.default", "dtype": "float32"}] and via_t["calls"] == 45


def test_host_work_is_not_the_chips() -> None:
    # AdamW's step counter is a CPU tensor (step_t += 1): host work, never routed on a chip; on the
    # host CPU itself every call counts.
    on_chip = coverage(_spec("gpt"), "emu:minimal", train=True).data
    adds = sum(op["calls"] for op in on_chip["ops"] if op["op"] == "aten::add_.Tensor" and not op["via"])
    assert adds == 28  # one per parameter: exp_avg_sq's addcmul_ ... the step counters are not here
    on_cpu = coverage(_spec("gpt"), "cpu", train=True).data
    assert sum(op["calls"] for op in on_cpu["ops"] if op["op"] == "aten::add_.Tensor") == 56


def test_data_dependent_guard_falls_back_to_a_real_run_and_says_so() -> None:
    # nn.TransformerEncoder with a mask: PyTorch's _detect_is_causal_mask compares the mask's values.
    spec = _fixture("encoder")
    state = torch.random.get_rng_state()
    report = coverage(spec, "emu:minimal", train=True)
    data = report.data
    assert "GuardOnDataDependentSymNode" in data["real_run"]
    assert data["summary"]["traced_on"] == "real CPU run"
    assert data["notes"][0].startswith("Recorded from a real CPU run of the example inputs")
    assert any("recorded from a real CPU run" in value for _, value in report.summary)
    assert torch.equal(torch.random.get_rng_state(), state)  # dropout ran on a forked generator
    assert data["summary"]["calls"] > 100 and data["summary"]["unsupported_calls"] == 0
    # without the fallback, the error says what happened and does not ask to edit PyTorch
    with pytest.raises(TraceError, match="records a real CPU run") as info:
        trace(spec, train=True)
    assert "Write the branch" not in str(info.value)


def test_a_meta_model_that_needs_a_real_run_is_a_clear_error() -> None:
    spec = _fixture("encoder")
    with torch.device("meta"):
        model = copy.deepcopy(spec.model).to("meta")
    meta = ModelSpec("meta-encoder", model, (spec.inputs[0].to("meta"),), None)
    with pytest.raises(TraceError, match="build it on the CPU"):
        coverage(meta, "emu:minimal", train=True)


def test_cuda_records_the_fused_attention_kernel_it_would_pick() -> None:
    data = coverage(_spec("gpt"), "cuda", train=True).data
    ops = {op["op"] for op in data["ops"]}
    # float32 without a mask: memory-efficient attention (flash takes float16/bfloat16 only)
    assert "aten::_scaled_dot_product_efficient_attention.default" in ops
    assert "aten::_scaled_dot_product_efficient_attention_backward.default" in ops
    assert "aten::_safe_softmax.default" not in ops and not any(op.endswith("_for_cpu.default") for op in ops)
    assert any("_scaled_dot_product_efficient_attention.default" in note for note in data["notes"])
    amp = coverage(_spec("gpt"), "cuda", train=True, amp=True).data
    flash = [op for op in amp["ops"] if op["op"] == "aten::_scaled_dot_product_flash_attention.default"]
    assert flash and flash[0]["dtype"] == "float16"  # float16 under autocast
    # its rng_state/unused returns are uint64, which is no dtype the chip computes in: not a refusal
    assert flash[0]["route"] == "native" and amp["summary"]["unsupported_calls"] == 0


def test_emulated_cuda_takes_the_fused_kernel_the_emulator_runs() -> None:
    # as the real chip: the fused kernel, which the emulated device computes with the host's one
    data = coverage(_spec("gpt"), "emu:cuda", train=True).data
    ops = {op["op"] for op in data["ops"]}
    assert "aten::_scaled_dot_product_efficient_attention.default" in ops
    assert "aten::_scaled_dot_product_efficient_attention_backward.default" in ops
    assert "aten::_safe_softmax.default" not in ops
    assert ops == {op["op"] for op in coverage(_spec("gpt"), "cuda", train=True).data["ops"]}
    assert any("The emulated device runs the same kernel" in note for note in data["notes"])
    # a chip without fused kernels (mps's table has none of them): the math path, in both
    mps = coverage(_spec("gpt"), "emu:mps", train=True).data
    assert "aten::_safe_softmax.default" in {op["op"] for op in mps["ops"]}
    assert any("as the emulator computes it on the CPU" in note for note in mps["notes"])
    # Either on the emulated backend's own tensors, or (in a process where it cannot be registered,
    # as in a test session after other backward passes) on meta tensors, and the report says which.
    assert any("tensors of the emulated backend" in note or "could not be registered" in note
               for note in data["notes"])


def test_cpu_only_kernels_are_not_a_chips() -> None:
    # On the CPU an LSTM runs through oneDNN (mkldnn_rnn_layer); no other backend calls it.
    cpu = {op["op"] for op in coverage(_fixture("lstm"), "cpu", train=True).data["ops"]}
    assert any(op.startswith("aten::mkldnn_rnn_layer") for op in cpu)
    mps = {op["op"] for op in coverage(_fixture("lstm"), "mps", train=True).data["ops"]}
    assert not any("mkldnn" in op for op in mps)
    # Training-mode dropout is one native_dropout call on a CUDA backend, the bernoulli_ path on MPS.
    cuda = {op["op"] for op in coverage(_fixture("dropout"), "cuda", train=True).data["ops"]}
    assert "aten::native_dropout.default" in cuda and "aten::bernoulli_.float" not in cuda
    assert "aten::bernoulli_.float" in {op["op"] for op in coverage(_fixture("dropout"), "mps", train=True).data["ops"]}


def test_closures_over_submodules_and_cached_attributes() -> None:
    # minGPT reaches its MLP through a lambda over the ModuleDict: the trace must see its own tensors
    # there too (a copied model would compute with the original's real CPU parameters).
    spec = _fixture("closure_mlp")
    data = coverage(spec, "emu:minimal", train=True).data
    assert {m["module"] for op in data["ops"] for m in op["modules"]} >= {"mlp.fc", "mlp.proj"}
    assert all(p.grad is None for p in spec.model.parameters())
    # word_language_model caches its mask on the module: nothing of the trace stays behind.
    spec = _fixture("cached_mask")
    coverage(spec, "emu:minimal", train=True)
    assert spec.model.src_mask is None and spec.model.training


def test_a_fallback_the_cpu_cannot_run_is_unsupported(monkeypatch: pytest.MonkeyPatch) -> None:
    # Fused attention has no CPU kernel: routed to the CPU it cannot run there either.
    monkeypatch.setenv("FL_ROUTE", "aten::_scaled_dot_product_efficient_attention=fallback")
    data = coverage(_spec("gpt"), "cuda", train=True).data
    attention = next(op for op in data["ops"]
                     if op["op"] == "aten::_scaled_dot_product_efficient_attention.default")
    assert attention["route"] == "unsupported" and "the CPU has no kernel for it either" in attention["source"]
    assert data["summary"]["unsupported_calls"] == 2  # one per block


@pytest.mark.slow
def test_amp_on_cuda_uses_cudas_autocast_lists(tmp_path: Path) -> None:
    # A fresh process, as a user runs it: the emulated backend (which registers PyTorch's CUDA autocast
    # lists) can be registered there before any backward pass.
    import os
    import subprocess
    import sys

    out = tmp_path / "cov.json"
    env = {**os.environ, "PYTHONPATH": str(EXAMPLES.parent / "src")}
    done = subprocess.run([sys.executable, "-m", "torch_fl", "coverage", f"{EXAMPLES / 'gpt.py'}:factory",
                           "--device", "cuda", "--train", "--amp", "--json", str(out)],
                          env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    data = json.loads(out.read_text())
    pairs = {(op["op"], op["dtype"]) for op in data["ops"]}
    assert ("aten::addmm.default", "float16") in pairs  # CUDA's lower-precision list
    assert ("aten::native_layer_norm.default", "float32") in pairs  # CUDA's float32 list
    assert ("aten::_scaled_dot_product_flash_attention.default", "float16") in pairs
    assert any("PyTorch's CUDA autocast op lists" in note for note in data["notes"])


def test_a_virtual_id_mapped_to_an_emulated_chip_is_traced_as_that_chip(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FL_DEVICE", "emu:minimal")
    via_id = coverage(_spec("gpt"), "acc0", train=True).data
    direct = coverage(_spec("gpt"), "emu:minimal", train=True).data
    assert via_id["device"] == "minimal" and via_id["summary"] == direct["summary"]


def test_a_registered_kernels_own_calls_are_routed_too() -> None:
    # On the emulated device a kernel computes with the device's tensors, so its calls are routed (and
    # counted) like the model's: ones_like translates on minimal.
    def gelu(x: torch.Tensor, approximate: str = "none") -> torch.Tensor:
        return x * 0.5 * (torch.ones_like(x) + torch.erf(x / 2.0 ** 0.5))

    handle = torch.fl.register_kernel("aten::gelu", gelu)
    try:
        data = coverage(_spec("gpt"), "emu:minimal", train=True).data
    finally:
        handle.remove()
    gelu_row = next(op for op in data["ops"] if op["op"] == "aten::gelu.default")
    assert gelu_row["route"] == "kernel" and gelu_row["calls"] == 2 and gelu_row["verdict"] == "translate"
    inner = next(op for op in data["ops"] if op["op"] == "aten::ones_like.default" and op["via"])
    assert inner["via"] == [{"op": "aten::gelu.default", "dtype": "float32"}] and inner["calls"] == 2
    assert inner["route"] == "translate"


def test_the_model_keeps_its_own_tensors_after_a_trace() -> None:
    # A module registered under two names, parametrizations and a non-persistent buffer: after the trace
    # every entry is the model's own tensor again (torch's _reparametrize_module(tie_weights=True) left
    # a stand-in in the shared module, and `.to(device)` then failed).
    spec = _fixture("parametrized")
    before = {name: id(t) for name, t in (*spec.model.named_parameters(remove_duplicate=False),
                                          *spec.model.named_buffers(remove_duplicate=False))}
    coverage(spec, "emu:minimal", train=True)
    after = {name: id(t) for name, t in (*spec.model.named_parameters(remove_duplicate=False),
                                         *spec.model.named_buffers(remove_duplicate=False))}
    assert after == before
    assert all(not isinstance(t, torch._subclasses.fake_tensor.FakeTensor) for t in spec.model.parameters())
