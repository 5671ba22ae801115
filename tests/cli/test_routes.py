"""`torchfl routes`: the route table of a device (show) and the comparison of two route logs (diff)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

import torch_fl
from torch_fl.cli import main, routes
from torch_fl.description.probe import all_aten_ops
from torch_fl.routing.table import ROUTES

TINY_MODEL = """\
import torch, torch_fl
torch.manual_seed(0)
dev = torch.fl.device()  # activates routing: the emulated chip of FL_DEVICE (only its tensors are checked)
model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.GELU(), torch.nn.LayerNorm(16),
                            torch.nn.Linear(16, 4)).to(dev)
x = torch.randn(4, 8, device=dev)
for _ in range(3):
    model(x).sum().backward()
"""
# sum translates on emu:minimal and addmm is native there: forcing both gives a changed route and an
# op that is routed only in the second log.
FORCED = "aten::sum=fallback,aten::addmm=fallback"


@pytest.fixture(autouse=True)
def cpu_backend(monkeypatch: pytest.MonkeyPatch) -> None:
    # acc0 and the default device mean the CPU here even on a machine with an accelerator.
    monkeypatch.setenv("FL_BACKEND", "cpu")
    torch_fl.reset()


def _show(capsys: pytest.CaptureFixture[str], *argv: str) -> dict:
    assert main(["routes", "show", "--json", *argv]) == 0
    return json.loads(capsys.readouterr().out)


def _table_rows(out: str) -> list[list[str]]:
    lines = out.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("op "))
    return [line.split(None, 2) for line in lines[start + 1:]]


# show ---------------------------------------------------------------------------------------------
def test_show_on_cpu_lists_the_ops_that_are_not_native(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["routes", "show"]) == 0
    out = capsys.readouterr().out
    assert "description 'cpu'" in out and f"{len(all_aten_ops())} aten overloads" in out
    rows = _table_rows(out)
    assert rows and all(route != "native" and route in ROUTES for _, route, _ in rows)


def test_show_header_names_where_the_native_ops_come_from(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["routes", "show", "--device", "npu"]) == 0
    out = capsys.readouterr().out
    assert "native ops from: table tables/npu.txt (torch_npu " in out  # the vendor table and its line
    assert main(["routes", "show", "--device", "minimal"]) == 0
    assert "native ops from: file:tables/minimal.txt" in capsys.readouterr().out


def test_show_json_shape(capsys: pytest.CaptureFixture[str]) -> None:
    data = _show(capsys)
    assert set(data) == {"device", "description", "dtype", "summary", "ops"}
    assert data["description"] == "cpu" and data["dtype"] is None
    assert set(ROUTES) <= set(data["summary"])
    assert sum(data["summary"].values()) == len(all_aten_ops())
    assert len(data["ops"]) == len(all_aten_ops()) - data["summary"]["native"]
    for row in data["ops"]:
        assert set(row) == {"op", "route", "source"}
        assert row["op"].startswith("aten::") and row["route"] != "native" and row["source"]


def test_show_all_lists_every_op(capsys: pytest.CaptureFixture[str]) -> None:
    data = _show(capsys, "--all")
    assert [row["op"] for row in data["ops"]] == all_aten_ops()


def test_show_is_fast_and_activates_nothing() -> None:
    start = time.process_time()  # CPU time: a loaded machine stretches wall time, not this
    rows = routes.route_rows(routes.governing("mps"), "float16")
    elapsed = time.process_time() - start
    assert len(rows) == len(all_aten_ops())
    assert elapsed < 2.0, f"routes of {len(rows)} ops took {elapsed:.2f} s of CPU time"
    assert torch_fl.routing.active() is None  # no routers installed, no route log armed


@pytest.mark.parametrize(("device", "description"), [
    ("acc0", "cpu"), ("cpu:0", "cpu"), ("cpu", "cpu"), ("cuda", "cuda"), ("mps", "mps"),
    ("emu:minimal", "minimal"),
])
def test_show_accepts_device_ids_and_description_names(
        capsys: pytest.CaptureFixture[str], device: str, description: str) -> None:
    data = _show(capsys, "--device", device, "--op", "gelu")
    assert data["description"] == description and data["device"] == device


def test_show_follows_fl_device(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FL_DEVICE", "emu:minimal")
    torch_fl.reset()
    assert _show(capsys)["description"] == "minimal"


def test_show_mps_falls_back_and_has_no_float64(capsys: pytest.CaptureFixture[str]) -> None:
    assert _show(capsys, "--device", "mps")["summary"]["fallback"] > 0
    by_op = {row["op"]: row for row in _show(capsys, "--device", "mps", "--dtype", "float64", "--all")["ops"]}
    assert by_op["aten::mm.default"]["route"] != "native"
    assert _show(capsys, "--device", "mps", "--dtype", "torch.float32", "--all")["dtype"] == "float32"


def test_show_emu_minimal_translates_many_ops(capsys: pytest.CaptureFixture[str]) -> None:
    data = _show(capsys, "--device", "emu:minimal")
    assert data["description"] == "minimal"
    assert data["summary"]["translate"] > 500
    assert "ops.default" in next(r for r in data["ops"] if r["route"] == "translate")["source"]


def test_route_filter(capsys: pytest.CaptureFixture[str]) -> None:
    summary = _show(capsys, "--device", "emu:minimal")["summary"]
    for route in ("translate", "native"):
        ops = _show(capsys, "--device", "emu:minimal", "--route", route)["ops"]
        assert len(ops) == summary[route] and {row["route"] for row in ops} == {route}


def test_op_filter(capsys: pytest.CaptureFixture[str]) -> None:
    data = _show(capsys, "--op", "gelu", "--all")
    assert data["ops"] and all("gelu" in row["op"] for row in data["ops"])
    assert sum(data["summary"].values()) == len(data["ops"])


def test_fl_route_override_shows_its_source(capsys: pytest.CaptureFixture[str],
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FL_ROUTE", "aten::gelu=fallback")
    torch_fl.reset()
    by_op = {row["op"]: row for row in _show(capsys, "--device", "emu:minimal", "--op", "gelu")["ops"]}
    assert by_op["aten::gelu.default"] == {"op": "aten::gelu.default", "route": "fallback", "source": "FL_ROUTE"}
    assert main(["routes", "show", "--device", "emu:minimal", "--route", "fallback"]) == 0
    assert ["aten::gelu.default", "fallback", "FL_ROUTE"] in _table_rows(capsys.readouterr().out)


@pytest.mark.parametrize(("argv", "message"), [
    (["--dtype", "flaot32"], "not a torch dtype"),
    (["--device", "emu:minimla"], "Did you mean 'minimal'"),
    (["--device", "acc9"], "device 'acc9' does not exist"),
])
def test_show_bad_arguments(capsys: pytest.CaptureFixture[str], argv: list[str], message: str) -> None:
    assert main(["routes", "show", *argv]) == 2  # bad input
    assert message in capsys.readouterr().err


# diff ---------------------------------------------------------------------------------------------
def _run_tiny_model(log: Path, home: Path, route: str = "") -> Path:
    env = {k: v for k, v in os.environ.items() if not k.startswith("FL_")}
    env.update(FL_DEVICE="emu:minimal", FL_ROUTE_LOG=str(log), XDG_CONFIG_HOME=str(home),
               PYTHONWARNINGS="ignore")
    if route:
        env["FL_ROUTE"] = route
    subprocess.run([sys.executable, "-c", TINY_MODEL], env=env, cwd=home, check=True, timeout=120)
    return log


@pytest.fixture(scope="module")
def logs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Route logs of three real runs: two alike, and one with FORCED routes."""
    folder = tmp_path_factory.mktemp("route-logs")
    return {"before": _run_tiny_model(folder / "before.json", folder),
            "again": _run_tiny_model(folder / "again.json", folder),
            "forced": _run_tiny_model(folder / "forced.json", folder, FORCED)}


def _diff(capsys: pytest.CaptureFixture[str], *argv: object) -> tuple[int, str, str]:
    code = main(["routes", "diff", *map(str, argv)])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


@pytest.mark.slow
def test_real_logs_are_route_logs(logs: dict[str, Path]) -> None:
    data = json.loads(logs["before"].read_text())
    assert data["description"] == "minimal" and data["records"]
    assert {r["route"] for r in data["records"]} == {"translate"}


@pytest.mark.slow
def test_identical_runs_exit_0(capsys: pytest.CaptureFixture[str], logs: dict[str, Path]) -> None:
    code, out, _ = _diff(capsys, logs["before"], logs["again"])
    assert code == 0 and "identical" in out


@pytest.mark.slow
def test_changed_routes_exit_1_with_a_table(capsys: pytest.CaptureFixture[str], logs: dict[str, Path]) -> None:
    code, out, _ = _diff(capsys, logs["before"], logs["forced"])
    assert code == 1
    rows = {(row[0], row[1]): row for row in (line.split() for line in out.splitlines()) if len(row) > 3}
    changed = rows[("route", "aten::sum.default")]
    assert changed[2] == "float32" and changed[3] == "translate" and "fallback" in changed
    assert rows[("added", "aten::addmm.default")][3] == "-"


@pytest.mark.slow
def test_diff_json(capsys: pytest.CaptureFixture[str], logs: dict[str, Path]) -> None:
    code, out, _ = _diff(capsys, logs["before"], logs["forced"], "--json")
    data = json.loads(out)
    assert code == 1 and data["identical"] is False
    assert data["before"]["path"] == str(logs["before"]) and data["after"]["description"] == "minimal"
    changes = {(c["change"], c["op"]): c for c in data["changes"]}
    route = changes[("route", "aten::sum.default")]
    assert list(route["before"]) == ["translate"] and list(route["after"]) == ["fallback"]
    assert changes[("added", "aten::addmm.default")]["before"] == {}
    assert data["summary"]["route"] >= 1 and data["summary"]["added"] >= 1
    assert main(["routes", "diff", "--json", "-", str(logs["forced"]), str(logs["before"])]) == 1
    reverse = json.loads(capsys.readouterr().out)
    assert ("removed", "aten::addmm.default") in {(c["change"], c["op"]) for c in reverse["changes"]}
    # --json FILE: the JSON goes to the file and the table is printed as without --json
    written = logs["before"].parent / "diff.json"
    assert main(["routes", "diff", str(logs["forced"]), str(logs["before"]), "--json", str(written)]) == 1
    assert "removed" in capsys.readouterr().out
    assert json.loads(written.read_text(encoding="utf-8"))["changes"] == reverse["changes"]


@pytest.mark.slow
def test_call_counts(capsys: pytest.CaptureFixture[str], logs: dict[str, Path], tmp_path: Path) -> None:
    data = json.loads(logs["before"].read_text())
    data["records"][0]["calls"] += 5
    more = tmp_path / "more.json"
    more.write_text(json.dumps(data))
    code, out, _ = _diff(capsys, logs["before"], more)
    assert code == 1 and "1 call count changed" in out and data["records"][0]["op"] in out
    assert _diff(capsys, logs["before"], more, "--ignore-calls")[0] == 0


@pytest.mark.parametrize(("content", "message"), [
    (None, "no such file"),
    ('{"records": [', "not JSON (line 1"),
    ("[1, 2]", "no 'records' list"),
    ('{"records": [{"op": "aten::gelu.default", "dtype": "float32", "route": "translate"}]}',
     "records[0]: 'calls' must be a non-negative integer"),
    ('{"records": ["aten::gelu"]}', "records[0] is str, not an object"),
])
@pytest.mark.slow
def test_bad_logs_exit_2_naming_the_file(capsys: pytest.CaptureFixture[str], logs: dict[str, Path],
                                          tmp_path: Path, content: str | None, message: str) -> None:
    bad = tmp_path / "bad.json"
    if content is not None:
        bad.write_text(content)
    code, out, err = _diff(capsys, logs["before"], bad)
    assert code == 2 and not out
    assert str(bad) in err and message in err and '"records"' in err  # names the expected shape
