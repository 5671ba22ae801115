"""Every rule against its fixture (tests/migrate/fixtures/rules/FLxxx.py or FLxxx/): the findings are
exactly the `# expect: CODES` markers, line by line. Plus the rules table, selection and docs."""

from __future__ import annotations

import re
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from torch_fl.migrate import scan
from torch_fl.migrate.rules import RULES, Finding, by_name, default_codes, expand, selected
from torch_fl.migrate.scan import scan_paths, scan_source

ROOT = Path(__file__).parents[2]
FIXTURES = Path(__file__).parent / "fixtures" / "rules"
DOCS = ROOT / "docs" / "migrate-rules.md"
MARKER = re.compile(r"expect:\s*(FL\d{3}(?:\s*,\s*FL\d{3})*)")


def fixture(code: str) -> Path:
    for candidate in (FIXTURES / f"{code}.py", FIXTURES / code):
        if candidate.exists():
            return candidate
    raise AssertionError(f"rule {code} has no fixture: add {FIXTURES / code}.py")


def expected(path: Path) -> Counter[tuple[str, int, str]]:
    files = sorted(p for p in path.rglob("*") if p.is_file()) if path.is_dir() else [path]
    marks: Counter[tuple[str, int, str]] = Counter()
    for file in files:
        for number, line in enumerate(file.read_text().splitlines(), 1):
            match = MARKER.search(line)
            if match:
                for code in re.split(r"\s*,\s*", match.group(1)):
                    marks[(file.relative_to(FIXTURES).as_posix(), number, code)] += 1
    return marks


def found(path: Path) -> Counter[tuple[str, int, str]]:
    result = scan_paths([path], select=["ALL"])  # performance rules (FL203) are opt-in
    assert not result.errors, result.errors
    return Counter((Path(f.path).relative_to(FIXTURES).as_posix(), f.line, f.code) for f in result.findings)


@pytest.mark.parametrize("code", list(RULES))
def test_fixture_findings_are_exactly_the_expect_markers(code):
    path = fixture(code)
    want, got = expected(path), found(path)
    assert any(c == code for _, _, c in want), f"{path} has no positive case (# expect: {code})"
    missing, extra = want - got, got - want
    assert not missing and not extra, f"missing (expected, not found): {sorted(missing)}; " \
                                      f"extra (found, not expected): {sorted(extra)}"


@pytest.mark.parametrize("code", list(RULES))
def test_every_rule_is_documented(code):
    rule = RULES[code]
    text = DOCS.read_text()
    assert f"## {code} {rule.name}\n" in text
    assert f'<a id="{rule.anchor}"></a>' in text
    for field in ("what", "why", "example", "use_instead"):
        assert getattr(rule, field).strip(), f"{code}.{field} is empty"


def test_rule_docs_are_generated_from_the_table():
    result = subprocess.run([sys.executable, str(ROOT / "scripts" / "gen_rule_docs.py"), "--check"],
                            capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


def test_codes_are_stable():
    # Codes are public (noqa comments, CI configs): never renumber, only add.
    assert list(RULES) == [
        "FL101", "FL102", "FL103", "FL104", "FL105", "FL106", "FL107", "FL201", "FL202", "FL203", "FL204",
        "FL301", "FL302", "FL303", "FL401", "FL402", "FL501", "FL502", "FL503", "FL504", "FL601", "FL602",
        "FL603", "FL604", "FL701", "FL702", "FL703", "FL704", "FL705", "FL801", "FL901", "FL902", "FL903"]
    assert {r.fix for r in RULES.values()} <= {"safe", "unsafe", None}
    assert by_name("cuda-device-string").code == "FL101"
    with pytest.raises(KeyError, match="Did you mean 'cuda-method'"):
        by_name("cuda-methods")


def test_selection_follows_ruff():
    assert expand("FL1") == ["FL101", "FL102", "FL103", "FL104", "FL105", "FL106", "FL107"]
    assert expand("ALL") == list(RULES)
    with pytest.raises(ValueError, match="selects no rule"):
        expand("FL99")
    assert selected((["FL1"], ["FL105"])) == set(expand("FL1")) - {"FL105"}
    assert selected((["FL101"], ["FL1"])) == {"FL101"}  # the more specific selector wins
    default = default_codes()
    assert selected((None, ["FL2"])) == default - set(expand("FL2"))
    # A later layer's ignore adds to an earlier one; a later select replaces it.
    assert selected((None, ["FL2"]), (None, ["FL3"])) == default - set(expand("FL2")) - set(expand("FL3"))
    assert selected((["FL1"], None), (["FL5"], None)) == set(expand("FL5"))


def test_performance_hints_are_opt_in():
    assert "FL203" not in default_codes() and RULES["FL203"].category == "performance"
    assert all(rule.category == "coupling" for code, rule in RULES.items() if code != "FL203")
    assert "FL203" in selected((None, None, ["FL203"]))  # extend-select
    assert "FL203" in selected((["FL2"], None))
    loop = "import torch\nfor b in data:\n    total += b.sum().item()\n"
    assert scan_source(loop) == []
    assert [f.code for f in scan_source(loop, select=["FL203"])] == ["FL203"]
    # .item() of a tensor already on the host is no sync.
    assert scan_source("for b in data:\n    t += b.cpu().item()\n", select=["FL203"]) == []


def test_scan_source_api():
    source = "import torch\nx = torch.zeros(3).cuda()\ny = x.to('cuda')  # noqa: FL101\n"
    [finding] = scan_source(source, "model.py")
    assert isinstance(finding, Finding)
    assert finding.to_json() == {
        "code": "FL102", "name": "cuda-method", "path": "model.py", "line": 2, "col": 5,
        "end_line": 2, "end_col": 26, "message": "`.cuda()` moves to a CUDA device only",
        "fix_title": "Replace with `.to(torch.fl.device())`", "fixable": True, "safety": "safe",
        "fix_command": "torchfl fix"}
    assert scan_source(source, select=["FL2"]) == []
    with pytest.raises(SyntaxError):
        scan_source("def broken(:\n")


def test_fixable_depends_on_the_allowed_safety():
    source = 'device = "cuda"\nmodel.to(device)\n'
    [safe_only] = scan_source(source)
    [with_unsafe] = scan_source(source, unsafe_fixes=True)
    assert safe_only.safety == with_unsafe.safety == "unsafe"
    assert (safe_only.fixable, with_unsafe.fixable) == (False, True)


def test_columns_count_characters_not_bytes():
    [finding] = scan_source('label = "héllo wörld"; x.to("cuda")\n')
    assert (finding.col, finding.end_col) == (29, 35)  # "cuda" with quotes, after two 2-byte chars


def test_ranges_are_the_nodes_a_fix_rewrites():
    source = 'import torch\nd = torch.device("cuda", 1)\nx.to("cuda")\nm.cuda()\n'
    ranges = {f.code + str(f.line): (f.col, f.end_col) for f in scan_source(source)}
    lines = source.splitlines()
    assert lines[1][ranges["FL1012"][0] - 1:ranges["FL1012"][1] - 1] == 'torch.device("cuda", 1)'
    assert lines[2][ranges["FL1013"][0] - 1:ranges["FL1013"][1] - 1] == '"cuda"'
    assert lines[3][ranges["FL1024"][0] - 1:ranges["FL1024"][1] - 1] == "m.cuda()"


def test_the_text_prefilter_never_hides_a_finding(monkeypatch):
    # Modules without any trigger word are parsed but not walked; no fixture may depend on that.
    plain = {code: found(fixture(code)) for code in RULES}
    monkeypatch.setattr(scan.detector, "has_trigger", lambda text: True)
    assert {code: found(fixture(code)) for code in RULES} == plain


def test_deeply_nested_code_is_an_error_not_a_crash(tmp_path):
    deep = tmp_path / "deep.py"
    deep.write_text("x = torch.cuda.is_available()\ny = " + " + ".join(["a"] * 20000) + "\n")
    result = scan_paths([deep])
    assert [e.code for e in result.errors] == ["E999"] and result.findings == []


def test_values_imported_from_another_module_are_followed(tmp_path):
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "settings.py").write_text('DEVICE = "cuda"\nBACKEND = "nccl"\nLABEL = "cuda"  # never used as a device\n')
    (pkg / "train.py").write_text(
        "import torch\nimport torch.distributed as dist\nfrom pkg.settings import DEVICE\nfrom .settings import BACKEND\n\n"
        "def main():\n    dist.init_process_group(BACKEND)\n    return torch.zeros(1).to(DEVICE)\n")
    result = scan_paths([pkg])
    got = sorted((Path(f.path).name, f.line, f.code) for f in result.findings)
    assert got == [("settings.py", 1, "FL105"), ("settings.py", 2, "FL501")]
    assert all(not f.fixable and f.safety is None for f in result.findings)  # fix works file by file
    assert "train.py:8" in result.findings[0].message


def test_the_engine_names_no_rule_code():
    # Rules declare what they need (trigger words, file suffixes, whether a finding claims its site);
    # the engine (migrate/scan/) dispatches without knowing any code.
    import ast as _ast

    engine = Path(scan.__file__).parent
    for module in sorted(engine.glob("*.py")):
        tree = _ast.parse(module.read_text())
        docstrings = {id(node.body[0].value) for node in _ast.walk(tree)
                      if isinstance(node, (_ast.Module, _ast.FunctionDef, _ast.ClassDef)) and node.body
                      and isinstance(node.body[0], _ast.Expr) and isinstance(node.body[0].value, _ast.Constant)}
        codes = [node.value for node in _ast.walk(tree) if isinstance(node, _ast.Constant)
                 and isinstance(node.value, str) and id(node) not in docstrings and re.search(r"FL\d{3}", node.value)]
        assert codes == [], f"{module.name} names rule codes {codes}: declare it on the rule instead"


@pytest.mark.parametrize("code", [c for c in RULES if c != "FL702"])  # FL702's example is a file name
def test_each_rules_documented_example_is_flagged_and_its_use_instead_is_clean(code):
    rule = RULES[code]
    example = scan_source("import torch\n" + rule.example + "\n", select=["ALL"])
    assert code in {f.code for f in example}, f"{code}'s own example is not flagged"
    clean = scan_source("import torch\n" + rule.use_instead + "\n")
    assert clean == [], f"{code}'s 'use instead' is flagged: {[(f.code, f.message) for f in clean]}"
