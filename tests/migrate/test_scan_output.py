"""`torchfl scan` end to end: text / JSON / SARIF output against committed snapshots, noqa,
[tool.torchfl] configuration, unscannable files, directory walking and exit codes.

Snapshots live in tests/migrate/snapshots/; regenerate them with
``FL_UPDATE_SNAPSHOTS=1 pytest tests/migrate/test_scan_output.py`` and review the diff.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from torch_fl.cli import main
from torch_fl.migrate.rules import RULES
from torch_fl.migrate.scan import scan_paths

HERE = Path(__file__).parent
TREE = HERE / "fixtures" / "tree"
SNAPSHOTS = HERE / "snapshots"


def check_snapshot(name: str, text: str) -> None:
    path = SNAPSHOTS / name
    if os.environ.get("FL_UPDATE_SNAPSHOTS") == "1":
        with path.open("w", encoding="utf-8", newline="\n") as handle:
            handle.write(text)
        return
    assert path.exists(), f"no snapshot {path}: run FL_UPDATE_SNAPSHOTS=1 pytest {__file__}"
    assert text == path.read_text(encoding="utf-8"), (
        f"output differs from {path}; if the change is intended, run "
        f"FL_UPDATE_SNAPSHOTS=1 pytest {__file__} and review the diff")


@pytest.fixture
def tree(tmp_path, monkeypatch):
    """A copy of the fixture tree plus two files git should not hold, with the cwd inside it."""
    root = tmp_path / "tree"
    shutil.copytree(TREE, root)
    (root / "broken.py").write_text("import torch\ndef broken(:\n    torch.cuda.synchronize()\n")
    (root / "latin1.py").write_bytes(b"x = '\xff'  # not UTF-8, no coding cookie\n")
    monkeypatch.chdir(root)
    return root


def run(capsys, *args: str) -> tuple[int, str, str]:
    status = main(["scan", *args])
    out, err = capsys.readouterr()
    return status, out, err


# Snapshots ----------------------------------------------------------------------------------------
def test_text_snapshot(tree, capsys):
    status, out, _ = run(capsys, ".")
    assert status == 1
    check_snapshot("tree.txt", out)


def test_statistics_snapshot(tree, capsys):
    status, out, _ = run(capsys, ".", "--statistics")
    assert status == 1
    check_snapshot("tree-statistics.txt", out)


def test_json_snapshot(tree, capsys):
    status, out, _ = run(capsys, ".", "--format", "json")
    assert status == 1
    items = json.loads(out)
    assert {"code", "name", "path", "line", "col", "end_line", "end_col", "message", "fix_title",
            "fixable", "safety"} == set(items[0])
    assert all(not Path(item["path"]).is_absolute() for item in items)
    check_snapshot("tree.json", out)


def test_sarif_snapshot_and_shape(tree, capsys):
    status, out, _ = run(capsys, ".", "--format", "sarif")
    assert status == 1
    log = json.loads(out)
    assert log["version"] == "2.1.0" and log["$schema"].endswith("sarif-schema-2.1.0.json")
    [run_] = log["runs"]
    driver = run_["tool"]["driver"]
    assert driver["name"] == "torchfl"
    assert [r["id"] for r in driver["rules"]] == list(RULES)
    for rule in driver["rules"]:
        assert rule["name"] == RULES[rule["id"]].name
        assert rule["shortDescription"]["text"] and rule["fullDescription"]["text"]
        assert rule["helpUri"] == f"docs/migrate-rules.md#{rule['id'].lower()}"
        assert rule["defaultConfiguration"]["level"] in ("error", "warning", "note")
    assert run_["results"]
    for result in run_["results"]:
        assert driver["rules"][result["ruleIndex"]]["id"] == result["ruleId"]
        assert result["level"] in ("error", "warning", "note") and result["message"]["text"]
        [location] = result["locations"]
        physical = location["physicalLocation"]
        assert not physical["artifactLocation"]["uri"].startswith(("/", "file:"))
        region = physical["region"]
        assert set(region) == {"startLine", "startColumn", "endLine", "endColumn"}
        assert all(isinstance(v, int) and v >= 1 for v in region.values())
        assert (region["endLine"], region["endColumn"]) >= (region["startLine"], region["startColumn"])
    notes = run_["invocations"][0]["toolExecutionNotifications"]
    assert sorted(n["descriptor"]["id"] for n in notes) == ["E902", "E999"]
    driver["version"] = "VERSION"  # the snapshot must not change with every release
    check_snapshot("tree.sarif", json.dumps(log, indent=2) + "\n")


def test_output_file(tree, capsys):
    status, out, _ = run(capsys, ".", "--format", "json", "--output", "report.json")
    assert status == 1 and out == ""
    assert json.loads((tree / "report.json").read_text())[0]["path"] == "broken.py"


# What the tree snapshot relies on, stated directly --------------------------------------------------
def test_unscannable_files_are_reported_and_skipped(tree):
    result = scan_paths(["."])
    assert [(e.path, e.code) for e in result.errors] == [("broken.py", "E999"), ("latin1.py", "E902")]
    assert "SyntaxError" in result.errors[0].message and result.errors[0].line == 2
    assert not any(f.path in ("broken.py", "latin1.py") for f in result.findings)
    assert {f.path for f in result.findings} == {"csrc/add.cu", "pkg/kernels.py", "train.py"}


def test_config_ignores_and_excludes(tree):
    codes = {f.code for f in scan_paths(["."]).findings}
    assert "FL203" not in codes  # ignore = ["FL203"]
    assert not any(f.path.startswith("vendored") for f in scan_paths(["."]).findings)
    # A file named explicitly is scanned even when extend-exclude matches it, as in ruff.
    assert [f.code for f in scan_paths(["vendored/flash.py"]).findings] == ["FL801"]


def test_coding_cookie_is_honoured(tmp_path):
    path = tmp_path / "legacy.py"
    path.write_bytes(b"# -*- coding: latin-1 -*-\nlabel = '\xe9t\xe9'; x.to('cuda')\n")
    [finding] = scan_paths([path]).findings
    assert (finding.code, finding.col) == ("FL101", 21)  # characters: UTF-8 bytes would say 23


# Suppression comments -----------------------------------------------------------------------------
def test_noqa(tmp_path):
    source = tmp_path / "noqa.py"
    source.write_text(
        "x.to('cuda')  # noqa\n"                      # bare: every code
        "x.to('cuda')  # noqa: FL101\n"               # this code
        "x.to('cuda')  # NOQA:FL102,FL101\n"          # a list, any case, no space
        "x.to('cuda')  # noqa: FL102\n"               # another code: reported
        "x.to('cuda')  # noqa: E501\n"                # another tool's code: reported
        "y = torch.ones(  # noqa: FL101\n"            # first line of the statement covers it
        "    device='cuda')\n"
        "z = torch.ones(\n"
        "    device='cuda')  # noqa: FL101\n"         # the finding's own line
        "w = torch.ones(\n"
        "    3,\n"
        "    device='cuda',\n"
        ")  # noqa: FL101\n")                         # a later line of the statement does not count
    assert [f.line for f in scan_paths([source]).findings] == [4, 5, 12]


# Configuration ------------------------------------------------------------------------------------
def write_project(root: Path, table: str, header: str = "[tool.torch_fl.scan]") -> None:
    (root / "pyproject.toml").write_text(f"[project]\nname = 'x'\n\n{header}\n{table}\n")
    (root / "src").mkdir()
    (root / "src" / "train.py").write_text(
        "import torch\nx = torch.zeros(2).cuda()\ny = x.to('cuda')\nn = torch.cuda.device_count()\n"
        "torch.backends.cudnn.benchmark = True\n")


def codes(capsys, *args: str) -> list[str]:
    status, out, err = run(capsys, *args, "--format", "json")
    assert status in (0, 1), err
    return sorted({item["code"] for item in json.loads(out)})


def test_pyproject_select_and_ignore(tmp_path, monkeypatch, capsys):
    write_project(tmp_path, 'select = ["FL1", "FL2"]\nignore = ["FL102"]')
    monkeypatch.chdir(tmp_path / "src")  # the config is found upwards from the scanned path
    assert codes(capsys, ".") == ["FL101", "FL201"]
    assert codes(capsys, ".", "--ignore", "FL101") == ["FL201"]                 # adds to ignore
    assert codes(capsys, ".", "--select", "FL4") == ["FL401"]                   # replaces select
    assert codes(capsys, ".", "--select", "FL1,FL4", "--ignore", "FL101") == ["FL102", "FL401"]
    assert codes(capsys, ".", "--select", "FL102", "--select", "FL201") == ["FL102", "FL201"]


def test_nearest_pyproject_without_the_table_is_skipped(tmp_path, monkeypatch, capsys):
    write_project(tmp_path, 'select = ["FL2"]')
    (tmp_path / "src" / "pyproject.toml").write_text("[project]\nname = 'inner'\n")
    monkeypatch.chdir(tmp_path)
    assert codes(capsys, "src") == ["FL201"]


@pytest.mark.parametrize(("table", "message"), [
    ('selct = ["FL1"]', "unknown key(s) in [tool.torch_fl.scan]: selct (allowed: select, extend-select, ignore, "
                        "extend-exclude) Did you mean 'select'?"),
    ('select = ["FL99"]', "'FL99' selects no rule"),
    ('ignore = "FL101"', "ignore must be a list of strings"),
])
def test_bad_configuration_is_a_usage_error(tmp_path, monkeypatch, capsys, table, message):
    write_project(tmp_path, table)
    monkeypatch.chdir(tmp_path)
    status, out, err = run(capsys, "src")
    assert status == 2 and out == ""
    assert "pyproject.toml" in err and message in err


def test_old_table_is_read_with_a_deprecation_message(tmp_path, monkeypatch, capsys):
    write_project(tmp_path, 'select = ["FL2"]', header="[tool.torchfl]")
    monkeypatch.chdir(tmp_path)
    status, out, err = run(capsys, "src", "--format", "json")
    assert status == 1 and sorted({i["code"] for i in json.loads(out)}) == ["FL201"]
    assert "[tool.torchfl] is deprecated" in err and "[tool.torch_fl.scan]" in err


def test_extend_select_adds_performance_hints(tmp_path, monkeypatch, capsys):
    write_project(tmp_path, 'extend-select = ["FL203"]\nignore = ["FL4"]')
    (tmp_path / "src" / "loop.py").write_text("for b in data:\n    total += b.sum().item()\n")
    monkeypatch.chdir(tmp_path)
    assert codes(capsys, "src") == ["FL101", "FL102", "FL201", "FL203"]


# Exit codes ---------------------------------------------------------------------------------------
def test_exit_codes(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    Path("clean.py").write_text("import torch\nx = torch.zeros(2, device=torch.fl.device())\n")
    Path("dirty.py").write_text("import torch\nx = torch.zeros(2).cuda()\n")
    Path("broken.py").write_text("def f(:\n")
    status, out, _ = run(capsys, "clean.py")
    assert (status, out) == (0, "All checks passed: 1 file, 2 lines scanned.\n")
    status, out, _ = run(capsys, "dirty.py")
    assert status == 1
    assert out == ("dirty.py:2:5: FL102 [*] `.cuda()` moves to a CUDA device only\n"
                   "Found 1 finding (1 fixable with `torchfl fix`).\n")
    assert run(capsys, "dirty.py", "--exit-zero")[0] == 0
    assert run(capsys, "broken.py")[0] == 1
    status, _, err = run(capsys, "missing.py")
    assert status == 2 and "no such file or directory: missing.py" in err
    status, _, err = run(capsys, "dirty.py", "--select", "FL99")
    assert status == 2 and "'FL99' selects no rule" in err
    status, _, err = run(capsys, "dirty.py", "--format", "sarif", "--statistics")
    assert status == 2
    with pytest.raises(SystemExit) as exc:
        main(["scan", "dirty.py", "--format", "xml"])
    assert exc.value.code == 2


def test_unsafe_fixes_flag(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    Path("flow.py").write_text("device = 'cuda'\nmodel.to(device)\nm.cuda()\n")
    _, out, _ = run(capsys, "flow.py")
    assert "flow.py:1:10: FL105 [u] CUDA device" in out
    assert out.endswith("Found 2 findings (1 fixable with `torchfl fix`; 1 more, marked [u], with "
                        "`torchfl fix --unsafe-fixes`).\n")
    # JSON and SARIF say the same as the text: the finding has a fix, an unsafe one (issue 21).
    _, out, _ = run(capsys, "flow.py", "--format", "json")
    flow = next(item for item in json.loads(out) if item["code"] == "FL105")
    assert (flow["fixable"], flow["safety"], flow["fix_command"]) == (True, "unsafe", "torchfl fix --unsafe-fixes")
    _, out, _ = run(capsys, "flow.py", "--format", "sarif")
    props = next(r["properties"] for r in json.loads(out)["runs"][0]["results"] if r["ruleId"] == "FL105")
    assert props == {"fixable": True, "fixSafety": "unsafe", "fixCommand": "torchfl fix --unsafe-fixes"}
    _, out, _ = run(capsys, "flow.py", "--unsafe-fixes")
    assert "flow.py:1:10: FL105 [*] CUDA device" in out
    assert out.endswith("Found 2 findings (2 fixable with `torchfl fix --unsafe-fixes`).\n")


# Walking ------------------------------------------------------------------------------------------
def test_walk_skips_tool_directories_and_finds_cuda_sources(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    for skipped in (".git", ".venv", "venv", "__pycache__", "build", "dist", "node_modules",
                    "lib/site-packages"):
        Path(skipped).mkdir(parents=True)
        Path(skipped, "vendor.py").write_text("x.cuda()\n")
    Path("src/ops").mkdir(parents=True)
    Path("src/ops/kernel.cuh").write_text("// header\n")
    Path("src/ops/kernel.cu").write_text("// kernel\n")
    Path("src/train.py").write_text("x.cuda()\n")
    Path("src/notes.txt").write_text("x.cuda()\n")
    result = scan_paths(["."])
    assert [(f.path, f.line, f.col, f.code) for f in result.findings] == [
        ("src/ops/kernel.cu", 1, 1, "FL702"), ("src/ops/kernel.cuh", 1, 1, "FL702"),
        ("src/train.py", 1, 1, "FL102")]
    assert (result.files, result.lines) == (3, 1)
    # Overlapping arguments scan each file once.
    assert len(scan_paths(["src", "src/train.py"]).findings) == 3
