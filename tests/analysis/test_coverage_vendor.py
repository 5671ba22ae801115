"""Coverage on a vendor chip is answered from its vendor op table, per plugin release line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from torch_fl.analysis.coverage import coverage
from torch_fl.analysis.model import load_model
from torch_fl.cli import main
from torch_fl.errors import DescriptionError
from torch_fl.report import render_text

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
GPT = Path(__file__).resolve().parents[2] / "examples" / "gpt.py"


@pytest.fixture
def shift(tmp_path: Path) -> str:
    (tmp_path / "shift.py").write_text(MODEL, encoding="utf-8")
    return f"{tmp_path / 'shift.py'}:factory"


def _route(data: dict, op: str) -> str:
    return next(o["route"] for o in data["ops"] if o["op"] == op and not o["via"])


def test_an_op_ascend_added_in_2_7(shift):
    # Ascend registers bitwise_left_shift.Tensor_out in the torch_npu 2.7 line and from 2.9 (the wheels
    # 2.7.1.post11 and 2.9.0.post9 have it, 2.8.0.post5 not)
    old = coverage(load_model(shift), "npu", plugin_version="2.5").data
    # torch_npu's own CPU fallback runs it there (through the out= overload its forwarder calls)
    assert _route(old, SHIFT) == "fallback"
    assert old["plugin"]["version"] == "2.5" and old["plugin"]["plugin"] == "torch_npu"
    assert old["plugin"]["changes"] == [
        {"op": SHIFT, "change": "native in 2.7, 2.9-2.14 (not in 2.5): through aten::bitwise_left_shift.Tensor_out "
                                "in 2.7, 2.9-2.14"}]
    new = coverage(load_model(shift), "npu", plugin_version="2.7").data
    assert _route(new, SHIFT) == "native"
    newest = coverage(load_model(shift), "npu").data  # torch_npu not installed: the newest line
    assert newest["plugin"]["version"] == "2.14" and "not installed" in newest["plugin"]["why"]
    assert any("vendor op table" in note and "pypi:torch-npu==2.14.0 " in note for note in newest["notes"])


def test_cli_spelling_and_report(shift, tmp_path, capsys):
    out = tmp_path / "c.json"
    assert main(["coverage", shift, "--device", "npu", "--plugin-version", "2.5", "--json", str(out)]) == 0
    assert "native in 2.7, 2.9-2.14" in capsys.readouterr().out
    data = json.loads(out.read_text(encoding="utf-8"))
    assert data["plugin"]["changes"][0]["change"].startswith("native in 2.7, 2.9-2.14")


def test_a_row_agrees_with_its_route():
    # gelu.default is registered itself in torch_npu 2.1-2.6 only, but runs natively in every line
    # through gelu.out: the row said "native in 2.1-2.6 (not in 2.14)" beside route "native" (issue 42)
    data = coverage(load_model(f"{GPT}:factory"), "npu", train=True, plugin_version="2.14").data
    routes = {o["op"]: o["route"] for o in data["ops"] if not o["via"]}
    assert _route(data, "aten::gelu.default") == "native"
    assert "aten::gelu.default" not in {c["op"] for c in data["plugin"]["changes"]}
    for change in data["plugin"]["changes"]:  # "(not in V)" exactly where the route with V is not native
        assert ("(not in 2.14)" in change["change"]) == (routes[change["op"]] != "native"), change


def test_plugin_version_on_a_chip_without_a_table(shift):
    with pytest.raises(DescriptionError, match=r"'cuda' has no vendor op table.*chips with one: .*npu"):
        coverage(load_model(shift), "cuda", plugin_version="2.5")


# The vendor's own CPU fallback (ops.vendor_fallback, description/fallback.py) -------------------------
CHOLESKY = '''\
import torch


class Chol(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(4, 4)

    def forward(self, x):
        a = x.T @ x + 4 * torch.eye(4, device=x.device)
        return self.lin(torch.cholesky_inverse(a)) + torch.cholesky_inverse(a)


def factory():
    return Chol(), (torch.randn(8, 4),), None
'''
INVERSE = "aten::cholesky_inverse.default"


@pytest.fixture
def cholesky(tmp_path: Path) -> str:
    (tmp_path / "chol.py").write_text(CHOLESKY, encoding="utf-8")
    return f"{tmp_path / 'chol.py'}:factory"


def test_coverage_lists_what_runs_on_the_cpu_on_the_real_chip(cholesky):
    report = coverage(load_model(cholesky), "npu")
    data = report.data
    assert _route(data, INVERSE) == "fallback" and data["summary"]["unsupported_calls"] == 0
    on_cpu = data["on_cpu"]
    (row,) = on_cpu["ops"]
    # a 4x4 float32 matrix to the host (64 B) and its inverse back (64 B), per call
    assert (row["op"], row["calls"], row["by"], row["bytes_per_call"], row["bytes"]) == (INVERSE, 2, "vendor", 128, 256)
    assert "is not currently supported on the NPU backend and will fall back to run on the CPU" in row["source"]
    assert on_cpu["calls"] == data["summary"]["on_cpu_calls"] == 2 and on_cpu["bytes"] == 256
    assert on_cpu["vendor_fallback"] and "computed from the traced shapes" in on_cpu["cost"]
    text = render_text(report)
    assert "Runs on the CPU on the real chip (npu)" in text
    assert "2 calls of 1 (op, dtype) pair copy their tensors to the host and back (256 B in all)" in text
    assert any("run on the CPU on the real npu, silently but for the vendor's warning" in w and INVERSE in w
               for w in report.warnings)


def test_with_the_vendors_switch_off_it_is_unsupported_again(cholesky, monkeypatch):
    monkeypatch.setenv("TORCH_NPU_FALLBACK_CPU_DISABLE", "1")
    data = coverage(load_model(cholesky), "npu").data
    assert _route(data, INVERSE) == "unsupported" and data["summary"]["unsupported_calls"] == 2
    assert data["on_cpu"] == {**data["on_cpu"], "calls": 0, "bytes": 0, "ops": [], "vendor_fallback": False}


def test_cli_text_and_json_of_the_section(cholesky, tmp_path, capsys):
    out = tmp_path / "c.json"
    assert main(["coverage", cholesky, "--device", "mlu", "--json", str(out)]) == 0
    text = capsys.readouterr().out
    assert "Runs on the CPU on the real chip (mlu)" in text and "the vendor's stack" in text
    assert "on the CPU           2 calls (any depth) run on the CPU on the real chip, copying 256 B" in text
    data = json.loads(out.read_text(encoding="utf-8"))
    assert [(o["op"], o["bytes_per_call"]) for o in data["on_cpu"]["ops"]] == [(INVERSE, 128)]
