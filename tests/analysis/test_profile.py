"""torch.fl.profile (analysis/profile.py): the time by route, the top ops with their routes and the copies,
read from the fl:: ranges of a torch.profiler trace; their counts equal route_stats()."""

from __future__ import annotations

import json
import warnings
from collections import Counter
from pathlib import Path

import pytest
import torch

import torch_fl
from torch_fl.analysis.model import load_model
from torch_fl.analysis.profile import profile, profile_model
from torch_fl.errors import FallbackWarning
from torch_fl.report import render_text
from torch_fl.routing import router
from torch_fl.routing.install import GET_KERNEL_SINCE, supports_key_routing

needs_get_kernel = pytest.mark.skipif(not supports_key_routing(),
                                      reason=f"needs torch >= {GET_KERNEL_SINCE} (torch.library.get_kernel)")

@pytest.fixture
def routes(monkeypatch):
    def use(route: str) -> None:
        monkeypatch.setenv("FL_ROUTE", route)
        torch_fl.reset()
        torch_fl.reset_route_stats()
    yield use
    torch_fl.deactivate()
    torch_fl.reset()


def stats_calls() -> Counter:
    calls: Counter = Counter()
    for record in torch_fl.route_stats():
        calls[(record["route"], record["op"])] += record["calls"]
    return calls


def profile_calls(data) -> Counter:
    return Counter({(r["route"], r["op"]): r["calls"] for r in data["route_calls"]})


@needs_get_kernel
def test_model_on_the_cpu_key_with_a_translated_op(models, routes, tmp_path):
    routes("aten::gelu=translate")
    trace = tmp_path / "trace.json"
    report = profile_model(load_model(f"{models}:mlp"), "cpu", steps=3, warmup=0, trace=str(trace))
    data = report.data
    assert profile_calls(data) == stats_calls()
    # forward gelu translated 3 times (the backward op gelu_backward stays native on the CPU)
    assert profile_calls(data)[("translate", "aten::gelu.default")] == 3
    assert data["by_route"]["translate"]["calls"] == 3 and 0 < data["by_route"]["translate"]["share"] < 1
    gelu = [r for r in data["top_ops"] if r["op"] == "aten::gelu"]
    assert gelu and gelu[0]["route"] == "translate"
    assert all(r["route"] == "native" for r in data["top_ops"] if r["op"] == "aten::addmm")
    names = [e.get("name") for e in json.loads(trace.read_text())["traceEvents"]]
    assert names.count("fl::translate aten::gelu.default") == 3
    assert sum(name.startswith("ProfilerStep#") for name in names if name) == 3
    text = render_text(report)
    assert "Time by route" in text and "Top ops by self time" in text and "Host<->device copies" in text


def test_emulated_chip_ranges_equal_route_stats(models):
    torch_fl.reset_route_stats()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FallbackWarning)
        data = profile_model(load_model(f"{models}:mlp"), "emu:minimal", steps=2, warmup=0).data
    assert profile_calls(data) == stats_calls() != Counter()
    assert set(data["copies"]["emulated"]) >= {"h2d_calls", "d2h_calls", "syncs"}


def test_fallback_copies_are_counted():
    a, b = torch.randn(4, 5), torch.randn(5, 3)
    with profile() as result:
        router.cpu_fallback(torch.ops.aten.mm.default, (a, b), {}, force_copy=True)
    copies = result.summary()["copies"]["fallback"]
    assert copies["to_host"]["calls"] == 1 and copies["to_device"]["calls"] == 1


def test_no_routed_op_says_so():
    torch_fl.deactivate()
    with profile() as result:
        torch.randn(8) @ torch.randn(8)
    data = result.summary()
    assert data["by_route"] == {} and data["route_calls"] == []
    from torch_fl.analysis.profile import report

    assert "No op left its native route" in render_text(report({**data, "model": "m", "device": "cpu"}))


def test_summary_inside_the_block_says_when_to_read_it():
    with profile() as result, pytest.raises(RuntimeError, match="after the `with"):
        result.summary()


@needs_get_kernel
def test_cli_writes_trace_json_and_html(models, routes, tmp_path, capsys):
    from torch_fl.cli import main

    routes("aten::gelu=translate")
    trace, out, html = tmp_path / "t.json", tmp_path / "p.json", tmp_path / "p.html"
    assert main(["profile", f"{models}:mlp", "--device", "cpu", "--steps", "2", "--warmup", "1",
                 "--trace", str(trace), "--json", str(out), "--html", str(html), "-q"]) == 0
    data = json.loads(out.read_text())
    assert set(data) >= {"model", "device", "wall_s", "steps", "by_route", "route_calls", "top_ops", "copies"}
    assert data["trace"] == str(trace) and trace.stat().st_size > 0 and html.stat().st_size > 0
    assert "torchfl profile:" in capsys.readouterr().out


def test_cli_unsupported_op_and_bad_trace_folder(models, tmp_path, capsys):
    from torch_fl.cli import main

    assert main(["profile", f"{models}:bf16", "--device", "emu:minimal", "--steps", "1", "--warmup", "0",
                 "-q"]) == 1
    err = capsys.readouterr().err
    assert "emu:minimal cannot run" in err and "Traceback" not in err
    missing = Path(tmp_path, "no", "such", "t.json")
    assert main(["profile", f"{models}:mlp", "--device", "cpu", "--trace", str(missing), "-q"]) == 2
    assert "does not exist" in capsys.readouterr().err


def test_a_profiler_already_active_is_refused_and_can_be_read():
    with torch.profiler.profile() as outer:
        with pytest.raises(RuntimeError, match=r"already active.*Profile\(prof=that_profiler\)"), profile():
            pass
        torch.ones(2)
    from torch_fl.analysis.profile import Profile

    data = Profile(prof=outer).summary()
    assert data["by_route"] == {} and any(r["op"] == "aten::ones" for r in data["top_ops"])


@needs_get_kernel
def test_a_planted_slow_kernel_is_explained(models, routes):
    import time

    routes("")

    def slow_gelu(x, approximate="none"):
        time.sleep(0.05)  # (dominates the step even on a loaded machine)
        return x * 0.5

    handle = torch_fl.register_kernel("aten::gelu.default", slow_gelu, device_type="cpu")
    try:
        report = profile_model(load_model(f"{models}:mlp"), "cpu", steps=2, warmup=0, train=False)
    finally:
        handle.remove()
    data = report.data
    assert data["by_route"]["kernel"]["share"] > 0.5
    assert data["top_ops"][0]["op"] == "fl::kernel aten::gelu.default" and data["top_ops"][0]["route"] == "router"
    assert any("kernel routes take" in w and "aten::gelu.default" in w for w in report.warnings), report.warnings
