"""Non-native calls appear in torch.profiler traces as ranges named by route and op
("fl::translate aten::gelu.default"), one per call that route_stats() counts; native calls carry none,
and a fallback that copies shows its copies as fl::to_host / fl::to_device ranges."""

from __future__ import annotations

import json
import warnings

import pytest
import torch

import torch_fl
from torch_fl.errors import FallbackWarning
from torch_fl.routing import router as router_module
from torch_fl.routing.install import GET_KERNEL_SINCE, supports_key_routing

pytestmark = pytest.mark.skipif(not supports_key_routing(),
                                reason=f"needs torch >= {GET_KERNEL_SINCE} (torch.library.get_kernel)")


@pytest.fixture
def routed(monkeypatch):
    def activate(route: str):
        monkeypatch.setenv("FL_ROUTE", route)
        torch_fl.reset()
        torch_fl.reset_route_stats()
        return torch_fl.activate()
    yield activate
    torch_fl.deactivate()
    torch_fl.reset()


def fl_ranges(prof) -> dict[str, int]:
    return {e.key: e.count for e in prof.key_averages() if e.key.startswith("fl::")}


def stats_ranges() -> dict[str, int]:
    return {f"fl::{r['route']} {r['op']}": r["calls"] for r in torch_fl.route_stats()}


def test_translate_and_fallback_ranges_equal_route_stats(routed):
    routed("aten::gelu=translate,aten::mm.default=fallback")
    model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.GELU())
    x = torch.randn(4, 8)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FallbackWarning)
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
            for _ in range(3):
                model(x)
                x @ x.T  # a fallback (the CPU kernel on the CPU key)
    ranges = fl_ranges(prof)
    assert ranges == stats_ranges()
    assert ranges["fl::translate aten::gelu.default"] == 3
    assert ranges["fl::fallback aten::mm.default"] == 3
    # the translation's sub-ops run inside its range
    events = [e for e in prof.events() if e.name == "fl::translate aten::gelu.default"]
    children = {c.name for e in events for c in e.cpu_children}
    assert any(name.startswith("aten::") for name in children), children


def test_kernel_ranges_and_native_ops_carry_none(routed):
    routed("")
    handle = torch_fl.register_kernel("aten::gelu.default", lambda x, approximate="none": x * 0.5,
                                      device_type="cpu")
    try:
        x = torch.randn(16)
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
            torch.nn.functional.gelu(x)
            torch.relu(x)
            x @ x  # native: never intercepted, never ranged
    finally:
        handle.remove()
    assert fl_ranges(prof) == stats_ranges() == {"fl::kernel aten::gelu.default": 1}


def test_no_ranges_and_no_range_objects_without_a_profiler(routed, monkeypatch):
    routed("aten::gelu=translate")
    made = []
    monkeypatch.setattr(router_module, "_Range", lambda name: made.append(name))
    torch.nn.functional.gelu(torch.randn(8))
    assert made == [] and stats_ranges() == {"fl::translate aten::gelu.default": 1}


def test_fallback_copies_have_ranges_of_their_own():
    """cpu_fallback (a device with its own memory; force_copy makes the CPU take that path)."""
    a, b = torch.randn(4, 5), torch.randn(5, 3)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        out = router_module.cpu_fallback(torch.ops.aten.mm.default, (a, b), {}, force_copy=True)
    torch.testing.assert_close(out, a @ b)
    ranges = fl_ranges(prof)
    assert ranges == {"fl::to_host": 1, "fl::to_device": 1}
    to_host = next(e for e in prof.events() if e.name == "fl::to_host")
    assert {c.name for c in to_host.cpu_children} >= {"aten::clone"}


def test_chrome_trace_has_the_ranges(routed, tmp_path):
    routed("aten::gelu=translate")
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        torch.nn.functional.gelu(torch.randn(8))
        torch.nn.functional.gelu(torch.randn(8))
    path = tmp_path / "trace.json"
    prof.export_chrome_trace(str(path))
    names = [e.get("name") for e in json.loads(path.read_text())["traceEvents"]]
    assert names.count("fl::translate aten::gelu.default") == 2
