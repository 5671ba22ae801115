"""Coverage on a vendor chip is answered from its vendor op table, per plugin release line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from torch_fl.analysis.coverage import coverage
from torch_fl.analysis.model import load_model
from torch_fl.cli import main
from torch_fl.errors import DescriptionError

MODEL = '''\
import torch


class Shift(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(4, 4)

    def forward(self, x, k):
        return self.lin(x) * torch.bitwise_left_shift(k, k).float()


def factory():
    return Shift(), (torch.randn(2, 4), torch.ones(2, 4, dtype=torch.int64)), None
'''
SHIFT = "aten::bitwise_left_shift.Tensor"


@pytest.fixture
def shift(tmp_path: Path) -> str:
    (tmp_path / "shift.py").write_text(MODEL, encoding="utf-8")
    return f"{tmp_path / 'shift.py'}:factory"


def _route(data: dict, op: str) -> str:
    return next(o["route"] for o in data["ops"] if o["op"] == op and not o["via"])


def test_an_op_ascend_added_in_2_7(shift):
    # Ascend registers bitwise_left_shift.Tensor_out from torch_npu 2.7 (op-plugin's [v2.7, newest])
    old = coverage(load_model(shift), "npu", plugin_version="2.5").data
    # torch_npu's own CPU fallback runs it there (through the out= overload its forwarder calls)
    assert _route(old, SHIFT) == "fallback"
    assert old["plugin"]["version"] == "2.5" and old["plugin"]["plugin"] == "torch_npu"
    assert old["plugin"]["changes"] == [
        {"op": SHIFT, "change": "native from 2.7 (through aten::bitwise_left_shift.Tensor_out)"}]
    new = coverage(load_model(shift), "npu", plugin_version="2.7").data
    assert _route(new, SHIFT) == "native"
    newest = coverage(load_model(shift), "npu").data  # torch_npu not installed: the newest line
    assert newest["plugin"]["version"] == "2.15" and "not installed" in newest["plugin"]["why"]
    assert any("vendor op table" in note and "Ascend/op-plugin@" in note for note in newest["notes"])


def test_cli_spelling_and_report(shift, tmp_path, capsys):
    out = tmp_path / "c.json"
    assert main(["coverage", shift, "--device", "npu", "--plugin-version", "2.5", "--json", str(out)]) == 0
    assert "native from 2.7" in capsys.readouterr().out
    data = json.loads(out.read_text(encoding="utf-8"))
    assert data["plugin"]["changes"][0]["change"].startswith("native from 2.7")


def test_plugin_version_on_a_chip_without_a_table(shift):
    with pytest.raises(DescriptionError, match=r"'cuda' has no vendor op table.*chips with one: .*npu"):
        coverage(load_model(shift), "cuda", plugin_version="2.5")
