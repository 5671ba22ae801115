"""`torchfl scan` and `torchfl fix` as the other commands are (issue 31, item 5): `--json [FILE]` as every
command takes it (`--format json` stays), and progress on long runs: nothing for the first 2 s, then a stage
line with the file count on stderr, only to a terminal and never with --quiet."""

from __future__ import annotations

import json

import pytest

from torch_fl.cli import build_parser, main
from torch_fl.cli.file_progress import FileProgress

SOURCE = 'import torch\nx = torch.zeros(3).cuda()\n'


@pytest.fixture
def tree(tmp_path, monkeypatch):
    (tmp_path / "pkg").mkdir()
    for i in range(3):
        (tmp_path / "pkg" / f"m{i}.py").write_text(SOURCE)
    (tmp_path / "recipe.yaml").write_text("device: cuda\n")
    monkeypatch.chdir(tmp_path)
    return tmp_path


def test_json_alone_is_format_json_and_json_file_goes_beside_the_text(tree, capsys):
    assert main(["scan", "--format", "json", "."]) == 1
    as_format = capsys.readouterr().out
    assert main(["scan", "--json", "-", "."]) == 1
    assert capsys.readouterr().out == as_format
    assert main(["scan", ".", "--json"]) == 1
    assert capsys.readouterr().out == as_format
    codes = [item["code"] for item in json.loads(as_format)]
    assert codes == ["FL102", "FL102", "FL102", "FL107"]
    # --json FILE: the JSON there, the text report on stdout as usual; a second run may overwrite it.
    for _ in range(2):
        assert main(["scan", ".", "--json", "findings.json"]) == 1
        out = capsys.readouterr().out
        assert out.startswith("pkg/m0.py:2:5: FL102 [*] ") and out.endswith("(3 fixable with `torchfl fix`).\n")
        assert (tree / "findings.json").read_text() == as_format
    assert main(["scan", ".", "--statistics", "--json=counts.json"]) == 1
    assert json.loads((tree / "counts.json").read_text())[0] == {
        "code": "FL102", "name": "cuda-method", "count": 3, "fixable": True}


def test_json_conflicts_and_overwrites_are_usage_errors(tree, capsys):
    assert main(["scan", "--format", "sarif", "--json", "-", "."]) == 2
    assert "--json alone prints the JSON, and --format sarif asks for sarif" in capsys.readouterr().err
    assert main(["scan", ".", "--json", "pkg/m0.py"]) == 2
    assert "--json pkg/m0.py is a file being scanned" in capsys.readouterr().err
    assert (tree / "pkg" / "m0.py").read_text() == SOURCE


def test_scan_and_fix_take_json_and_quiet():
    for name, flags in (("scan", ("--json [FILE]", "-q, --quiet")), ("fix", ("-q, --quiet",))):
        help_text = build_parser([name])._subparsers._group_actions[0].choices[name].format_help()
        for flag in flags:
            assert flag in help_text, (name, flag)


def test_a_short_scan_shows_no_progress(tree, stderr, capsys):
    stream = stderr(tty=True)
    assert main(["scan", "."]) == 1
    assert stream.getvalue() == ""  # under 2 s: a linter prints its findings only


@pytest.mark.parametrize("command", ["scan", "fix"])
def test_a_long_run_shows_stage_lines_on_a_terminal_only(tree, stderr, capsys, monkeypatch, command):
    if command == "fix":
        pytest.importorskip("libcst")
    monkeypatch.setattr(FileProgress, "AFTER", 0.0)  # every run is "long"
    argv = [command, "--diff", "."] if command == "fix" else [command, "."]
    stream = stderr(tty=True)
    main(argv)
    err = stream.getvalue()
    want = "] scanning 4 files\n" if command == "scan" else "] fixing files\n"
    assert want in err, err
    assert "scanning" not in capsys.readouterr().out  # the report itself stays clean
    for tty, extra in ((False, []), (True, ["--quiet"])):  # piped, or asked to be quiet
        stream = stderr(tty=tty)
        main([*argv, *extra])
        assert "] scanning" not in stream.getvalue() and "] fixing" not in stream.getvalue()
