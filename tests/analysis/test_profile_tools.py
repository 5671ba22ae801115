"""The traces `torchfl profile` writes load in the tools people open them with, and their fl:: totals equal
route_stats() (issue 41 item 5): PyTorch's TensorBoard plugin (torch-tb-profiler) and HolisticTraceAnalysis.
Both are optional (not in CI's requirements): each test runs where its package is importable.

    pip install torch-tb-profiler HolisticTraceAnalysis -c <(echo torch==$(python -c 'import torch; print(torch.__version__)'))
"""

from __future__ import annotations

import importlib.util
import tempfile
import warnings
from collections import Counter
from pathlib import Path

import pytest

import torch_fl
from torch_fl.analysis.model import load_model
from torch_fl.analysis.profile import COPY_RANGES, profile_model
from torch_fl.errors import FallbackWarning
from torch_fl.routing.install import GET_KERNEL_SINCE, supports_key_routing

# (no profile runs when neither tool is installed, as in CI)
pytestmark = pytest.mark.skipif(not any(importlib.util.find_spec(m) for m in ("torch_tb_profiler", "hta")),
                                reason="neither torch-tb-profiler nor HolisticTraceAnalysis is installed")
EXAMPLES = Path(__file__).parents[2] / "examples"
# (model, device, FL_ROUTE): both models are native on the npu too, so routes are forced on every device for
# the trace to have translate and fallback ranges
CASES = [("gpt.py:factory", "cpu", "aten::gelu=translate,aten::mm.default=fallback"),
         ("cnn.py:factory", "cpu", "aten::relu=translate,aten::addmm.default=fallback"),
         ("gpt.py:factory", "emu:npu", "aten::gelu=translate,aten::mm.default=fallback"),
         ("cnn.py:factory", "emu:npu", "aten::relu=translate,aten::addmm.default=fallback")]


@pytest.fixture(params=CASES, ids=[f"{m.split('.')[0]}-{d}" for m, d, _ in CASES])
def traced(request, monkeypatch, tmp_path):
    model, device, route = request.param
    if device == "cpu" and not supports_key_routing():
        pytest.skip(f"routes on the CPU key need torch >= {GET_KERNEL_SINCE}")
    monkeypatch.setenv("FL_ROUTE", route)
    torch_fl.reset()
    folder = tmp_path / "run"
    folder.mkdir()
    trace = folder / "rank0.pt.trace.json"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FallbackWarning)
        data = profile_model(load_model(str(EXAMPLES / model)), device, steps=2, warmup=1, trace=str(trace)).data
    stats: Counter = Counter()
    for record in torch_fl.route_stats():
        stats[f"fl::{record['route']} {record['op']}"] += record["calls"]
    yield trace, stats, data
    torch_fl.deactivate()
    torch_fl.reset()


def fl_counts(names_and_counts) -> Counter:
    return Counter({name: n for name, n in names_and_counts if name.startswith("fl::") and name not in COPY_RANGES})


def test_tensorboard_plugin_loads_the_trace_and_counts_the_routes(traced):
    pytest.importorskip("torch_tb_profiler")
    from torch_tb_profiler.profiler.data import RunProfileData  # the plugin's own loader

    trace, stats, data = traced
    run = RunProfileData.parse("host_1", None, str(trace), tempfile.mkdtemp())
    assert len(run.steps_names) == 2
    assert stats and fl_counts((o.name, o.calls) for o in run.op_list_groupby_name) == stats
    assert stats == Counter({f"fl::{r['route']} {r['op']}": r["calls"] for r in data["route_calls"]})
    if data["device"].startswith("emu:"):  # the emulated chip's kernels and copies: device activity (issue 41)
        assert run.has_kernel  # (memcpy events: tests/routing/test_emu_profiling.py; these steps copy nothing)
        kernels = set(run.kernel_stat["name"]) if "name" in run.kernel_stat else set(run.kernel_stat.index)
        assert any(str(name).startswith("aten::") for name in kernels), kernels


def test_holistic_trace_analysis_loads_the_trace_and_counts_the_routes(traced):
    pytest.importorskip("hta")
    from hta.trace_analysis import TraceAnalysis

    trace, stats, data = traced
    # (HTA drops the last profiler step unless told: it is often cut short by the profiler's end)
    analysis = TraceAnalysis(trace_dir=str(trace.parent), include_last_profiler_step=True)
    assert len(analysis.get_profiler_steps()) == 2
    frame = analysis.t.get_trace(0)
    symbols = analysis.t.symbol_table.sym_table
    assert stats and fl_counts(Counter(symbols[i] for i in frame["name"]).items()) == stats
    if data["device"].startswith("emu:"):  # the emulated chip's kernels and copies on its streams (issue 41)
        on_device = {symbols[i] for i in frame[frame["stream"] >= 0]["name"]}
        assert any(n.startswith("aten::") for n in on_device), on_device
        breakdown = analysis.get_gpu_kernel_breakdown(visualize=False)[0]
        assert "COMPUTATION" in set(breakdown["kernel_type"])
