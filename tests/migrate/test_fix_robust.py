"""`torchfl fix` as robust and fast as scan (issue 30, item 5): valid Python nested past the default
recursion limit is scanned and fixed; a file changed on disk since fix read it is not overwritten (and
the report says so); the rewrite parses only the expressions it changes (and the import block), with
output equal to the whole-module rewrite."""

from __future__ import annotations

import ast
import os
from pathlib import Path

import pytest

pytest.importorskip("libcst")

from torch_fl.cli import main
from torch_fl.migrate import fix as fixmod
from torch_fl.migrate import fix_segments
from torch_fl.migrate.fix import fix_paths, fix_source
from torch_fl.migrate.scan import scan_paths, scan_source

HERE = Path(__file__).parent
CUDA_LINE = "y = torch.zeros(1).cuda()\n"

# Shapes CPython compiles whose trees are deeper than a recursive walk at the default limit allows.
DEEP = {
    "calls180": "x = " + "f(" * 180 + "1" + ")" * 180,
    "calls199": "x = " + "f(" * 199 + "1" + ")" * 199,
    "lists180": "x = " + "[" * 180 + "1" + "]" * 180,
    "ifexp500": "x = " + "1 if a else " * 500 + "2",
    "not500": "x = " + "not " * 500 + "a",
    "strcat3000": "x = " + " ".join(['"s"'] * 3000),
    "attr990": "x = a" + ".b" * 990,
}


@pytest.mark.parametrize("shape", list(DEEP))
def test_deeply_nested_valid_python_is_scanned_and_fixed(shape: str) -> None:
    source = f"import torch\n{DEEP[shape]}\n{CUDA_LINE}"
    compile(source, shape, "exec")  # valid Python
    assert [f.code for f in scan_source(source)] == ["FL102"]
    result = fix_source(source)
    assert result.applied == [("FL102", 3)]
    assert result.new_source.endswith("y = torch.zeros(1).to(torch.fl.device())\n")
    assert DEEP[shape] in result.new_source


def test_a_deep_file_does_not_end_the_tree_run(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "a_deep.py").write_text(f"import torch\n{DEEP['calls180']}\n{CUDA_LINE}")
    (tmp_path / "b_plain.py").write_text(f"import torch\n{CUDA_LINE}")
    assert main(["fix", str(tmp_path)]) == 0
    out = capsys.readouterr()
    assert "internal error" not in out.err and "RecursionError" not in out.err
    for name in ("a_deep.py", "b_plain.py"):
        assert "torch.fl.device()" in (tmp_path / name).read_text()
    assert scan_paths([tmp_path]).findings == []


# -- a file changed while fix runs -------------------------------------------------------------------


def test_a_file_saved_while_fix_runs_is_not_overwritten(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "train.py"
    path.write_text(f"import torch\n{CUDA_LINE}")
    saved = "import torch\ny = torch.zeros(2).cuda()  # the user's edit\n"
    real = fixmod._fix_text

    def edit_meanwhile(*args, **kwargs):  # an editor saves after fix read the file, before it writes
        result = real(*args, **kwargs)
        path.write_text(saved)
        return result

    monkeypatch.setattr(fixmod, "_fix_text", edit_meanwhile)
    report = fix_paths([path])
    assert path.read_text() == saved  # the save is kept
    [entry] = report.errors
    assert entry.applied == [] and not entry.changed
    assert "changed on disk since torchfl fix read it" in entry.error
    assert [p.name for p in tmp_path.iterdir()] == ["train.py"]  # no temp file left
    monkeypatch.setattr(fixmod, "_fix_text", edit_meanwhile)
    path.write_text(f"import torch\n{CUDA_LINE}")
    assert main(["fix", str(path)]) == 1
    assert "not written: the file changed on disk" in capsys.readouterr().err
    # Run again once the editor is done: fixed.
    monkeypatch.setattr(fixmod, "_fix_text", real)
    assert fix_paths([path]).applied == 1 and "torch.zeros(2).to(torch.fl.device())" in path.read_text()


def test_a_save_of_the_same_size_within_the_same_mtime_is_caught(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "train.py"
    path.write_text(f"import torch\n{CUDA_LINE}")
    stat = path.stat()
    real = fixmod._fix_text

    def same_size_same_mtime(*args, **kwargs):
        result = real(*args, **kwargs)
        path.write_text(f"import torch\n{CUDA_LINE}".replace("zeros(1)", "zeros(7)"))
        os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))  # a coarse-mtime filesystem
        return result

    monkeypatch.setattr(fixmod, "_fix_text", same_size_same_mtime)
    report = fix_paths([path])
    assert len(report.errors) == 1 and "zeros(7).cuda()" in path.read_text()


def test_a_touch_that_keeps_the_bytes_does_not_block_the_fix(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "train.py"
    path.write_text(f"import torch\n{CUDA_LINE}")
    real = fixmod._fix_text

    def touch(*args, **kwargs):
        result = real(*args, **kwargs)
        os.utime(path, ns=(1, 1))
        return result

    monkeypatch.setattr(fixmod, "_fix_text", touch)
    report = fix_paths([path])
    assert report.errors == [] and report.applied == 1


# -- the segment rewrite ------------------------------------------------------------------------------

CASES = {
    "import-dropped": ("import os\nfrom torch.cuda.amp import autocast, GradScaler\nimport torch\n\n"
                       "with autocast():\n    pass\nscaler = GradScaler()\n"),
    "import-line-dropped": ("import os\n\n# amp\nfrom torch.cuda.amp import autocast\n\n\nimport torch\n"
                            "with autocast():\n    y = torch.zeros(1).cuda()\n"),
    "no-imports": "x = torch.zeros(1).cuda()\n",
    "docstring-only": '"""Doc."""\nx = torch.zeros(1).cuda()\n',
    "late-torch-import": ("import os\nos.environ['X'] = '1'\nimport torch  # noqa: E402\n\n"
                          "x = torch.zeros(1).cuda()\n"),
    "multi-line-segment": ("import torch\nx = f(a,\n      'cuda' if torch.cuda.is_available()\n      else 'cpu')\n"
                           "y = (torch.zeros(1)\n     .cuda(\n        non_blocking=True))\n"),
    "crlf": "import torch\r\nx = torch.zeros(1).cuda()\r\nif x.device.type == 'cuda':\r\n    pass\r\n",
    "nested-findings": ("import torch\nd = torch.device('cuda' if torch.cuda.is_available() else 'cpu')\n"
                        "ok = x.is_cuda and y.device.type == 'cuda'\n"),
    "unicode-columns": "import torch\nname = 'é'; x = torch.zeros(1).cuda(); z = 'ü'.cuda()\n",
    "line-count-changes": ("import torch\nx = torch.zeros(1).cuda(\n    0,\n    non_blocking=True)\n"
                           "from torch.cuda.amp import autocast\nwith autocast():\n    pass\n"),
}


def _findings(source: str):
    return [f for f in scan_source(source) if f.safety in ("safe", "unsafe")]


@pytest.mark.parametrize("name", list(CASES))
def test_segment_rewrite_equals_the_whole_module_rewrite(name: str) -> None:
    source = CASES[name]
    found = _findings(source)
    assert found
    segments = fix_segments.rewrite_segments(source, found)
    module = fix_segments.rewrite_module(source, found)
    assert segments[0] == module[0]
    assert len(segments[1]) == len(module[1]) > 0
    ast.parse(segments[0])


FILES = sorted((HERE / "snapshots" / "fix").glob("*.before.py")) + sorted((HERE / "fixtures" / "rules").glob("*.py"))


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name)
def test_segment_rewrite_equals_the_whole_module_rewrite_on_fixtures(path: Path) -> None:
    source = path.read_text()
    found = _findings(source)
    if not found:
        pytest.skip("nothing to fix")
    assert fix_segments.rewrite_segments(source, found)[0] == fix_segments.rewrite_module(source, found)[0]


def test_user_parentheses_around_a_rewritten_expression_are_kept() -> None:
    # Where the module rewrite replaced the parenthesized node (dropping a comment inside the
    # parentheses), the segment rewrite edits inside them.
    source = ("import torch\nassert (\n    x.device.type == 'cuda'  # on the GPU\n), 'msg'\n"
              "flag = (x.device.type != 'cuda') == other\n")
    out = fix_source(source, unsafe=True).new_source
    assert "    torch.fl.is_accelerator(x.device.type)  # on the GPU\n), 'msg'" in out
    assert "flag = (not torch.fl.is_accelerator(x.device.type)) == other" in out  # precedence kept


def test_only_the_changed_expressions_are_parsed_by_libcst(monkeypatch: pytest.MonkeyPatch) -> None:
    import libcst

    body = "".join(f"def f{i}(x):\n    return x * {i} + len(str(x))  # filler\n\n\n" for i in range(400))
    source = f"import torch\n\n{body}y = torch.zeros(1).cuda()\nz = w.to('cuda')\n"
    parsed: list[int] = []
    real = libcst.parse_module

    def counting(text, *args, **kwargs):
        parsed.append(len(text))
        return real(text, *args, **kwargs)

    monkeypatch.setattr(libcst, "parse_module", counting)
    out = fix_source(source).new_source
    assert out.endswith("y = torch.zeros(1).to(torch.fl.device())\nz = w.to(torch.fl.device())\n")
    assert sum(parsed) < len(source) / 50, parsed  # two expressions and the import line, not 2,000 lines
