"""`torchfl profile --timeline` (analysis/profile.py's timeline_html): one profiled step of the trace as a
self-contained HTML page, the host's ranges and the emulated chip's stream with its kernels and a fallback's
copies (issue 41: the docs' screenshot is one of these, scripts/profile_screenshot.py)."""

from __future__ import annotations

import re

import pytest

import torch_fl
from torch_fl.analysis.profile import timeline_html
from torch_fl.cli import main


@pytest.fixture
def profiled(models, tmp_path, monkeypatch):
    monkeypatch.setenv("FL_ROUTE", "aten::gelu=translate,aten::addmm.default=fallback")
    monkeypatch.setenv("PYTHONWARNINGS", "ignore")
    torch_fl.reset()
    page, trace = tmp_path / "t.html", tmp_path / "t.json"
    with pytest.warns(torch_fl.errors.FallbackWarning):
        code = main(["profile", f"{models}:mlp", "--device", "emu:npu", "--steps", "2", "--warmup", "1",
                     "--trace", str(trace), "--timeline", str(page)])
    torch_fl.deactivate()
    torch_fl.reset()
    assert code == 0
    return page.read_text(), trace


def titles(page: str) -> list[str]:
    return re.findall(r"<title>([^<]*)</title>", page)


def test_the_timeline_draws_the_second_step_with_routes_kernels_and_copies(profiled):
    page, _ = profiled
    assert "http" not in page.replace("http://www.w3.org/2000/svg", "")  # (nothing to fetch: opens offline)
    events = [t.split("\n")[0] for t in titles(page)]
    assert "ProfilerStep#1" in events and "ProfilerStep#0" not in events
    assert {"fl::translate aten::gelu.default", "fl::fallback aten::addmm.default", "aten::erf"} <= set(events)
    assert ":0 (emulated by torch-fl)</text>" in page and "stream 0 (default)</text>" in page  # (npu:0 or emu:0)
    # the forward's fallback: its arguments (8x16 input, 16x32 weight, 32 bias floats) to the host and its 8x32
    # result back, with their bytes in the tooltip
    copies = [t for t in titles(page) if t.startswith("Memcpy")]
    assert any(t.startswith("Memcpy DtoH") and f"bytes: {(8 * 16 + 16 * 32 + 32) * 4}\n" in t for t in copies)
    assert any(t.startswith("Memcpy HtoD") and f"bytes: {8 * 32 * 4}\n" in t for t in copies)


def test_a_step_the_trace_lacks_is_named_with_the_ones_it_has(profiled):
    _, trace = profiled
    assert "ProfilerStep#0" in [t.split("\n")[0] for t in titles(timeline_html(str(trace), step=0))]
    with pytest.raises(ValueError, match=r"no ProfilerStep#7 \(it has 2 steps: ProfilerStep#0, ProfilerStep#1\)"):
        timeline_html(str(trace), step=7)
