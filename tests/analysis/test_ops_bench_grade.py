"""`torchfl grade` shows the ops an ops-bench overlay marks slow as "native but slow", a class of their own (issue 41
item 3: coverage and grade both show it; coverage's side is tests/cli/test_ops_bench.py)."""

from __future__ import annotations

import json

import pytest

import torch_fl
from torch_fl.analysis.ops_bench import write_overlay
from torch_fl.cli import main
from torch_fl.description import registry


@pytest.fixture
def slow_gelu_overlay(tmp_path, monkeypatch):
    """A cpu overlay, as ops-bench writes it, whose [ops.slow] lists gelu in float32."""
    site = tmp_path / "site"
    site.mkdir()
    write_overlay(site / "cpu.toml", "cpu", {"aten::gelu.default": {"float32": "slow"}})
    monkeypatch.setenv("FL_DESCRIPTION_PATH", str(site))
    monkeypatch.setenv("FL_ROUTE", "")
    registry.reload()
    torch_fl.reset()
    yield
    monkeypatch.undo()
    registry.reload()
    torch_fl.deactivate()
    torch_fl.reset()


def test_grade_names_the_native_but_slow_ops(models, tmp_path, slow_gelu_overlay, capsys):
    out = tmp_path / "g.json"
    main(["grade", f"{models}:mlp", "--device", "cpu", "--steps", "2", "--warmup", "0", "--no-preflight", "--json", str(out)])
    text = capsys.readouterr().out
    # the summary line and the warning: one (op, dtype) pair, the forward's one gelu call
    assert "native but slow" in text and "1 call of 1 (op, dtype) pair (torchfl ops-bench)" in text
    assert "native but slow on cpu: aten::gelu.default (float32) run natively" in text
    data = json.loads(out.read_text())
    assert data["measurements"]["coverage"]["native_slow"] == [{"op": "aten::gelu.default", "dtype": "float32",
                                                                "calls": 1}]
