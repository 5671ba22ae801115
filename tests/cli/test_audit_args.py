"""`torchfl audit --script x.py ...`: audit's --strict/--json anywhere on the line, the script's after `--`."""

from __future__ import annotations

import argparse
import subprocess
import sys

import pytest

from torch_fl.cli import audit


def _parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    audit.add_parser(parser.add_subparsers(), "audit", "audit")
    args = parser.parse_args(["audit", *argv])
    assert audit.split_script_args(args) is None
    return args


def test_strict_after_the_script_is_audits(capsys):
    args = _parse("--script", "x.py", "--lr=3", "--strict", "--json", "a.json")
    assert args.script == ["x.py", "--lr=3"] and args.strict and args.json == "a.json"
    err = capsys.readouterr().err
    assert "--strict after --script is audit's option" in err and "torchfl audit --script x.py -- --strict" in err


def test_after_double_dash_everything_is_the_scripts():
    args = _parse("--script", "x.py", "--lr=3", "--", "--strict", "--json=b", "pos")
    assert args.script == ["x.py", "--lr=3", "--strict", "--json=b", "pos"]
    assert not args.strict and args.json is None and args.model is None


def test_strict_before_script_still_works():
    args = _parse("--strict", "--script", "x.py", "--json=r.json")
    assert args.strict and args.script == ["x.py"] and args.json == "r.json"


def test_json_after_script_takes_a_file_or_means_stdout():
    assert _parse("--script", "x.py", "--json", "r.json").json == "r.json"
    assert _parse("--script", "x.py", "--json").json == "-"               # alone: the JSON on stdout
    args = _parse("--script", "x.py", "--json", "--lr=3")
    assert args.json == "-" and args.script == ["x.py", "--lr=3"]


@pytest.mark.parametrize(("argv", "message"), [
    (["--script", "x.py", "--strict=yes"], "--strict takes no value"),
    (["--script", "--strict", "x.py"], "--script needs the script first"),
])
def test_bad_lines_are_refused(argv, message):
    parser = argparse.ArgumentParser()
    audit.add_parser(parser.add_subparsers(), "audit", "audit")
    assert message in audit.split_script_args(parser.parse_args(["audit", *argv]))


@pytest.mark.slow  # two torchfl processes
def test_strict_anywhere_sets_the_exit_status(tmp_path):
    script = tmp_path / "x.py"
    script.write_text("import sys, torch\nprint('argv', sys.argv[1:])\ntorch.ones(2).cuda()\n")

    def run(*argv: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "torch_fl", "audit", "--script", str(script), *argv],
                              capture_output=True, text=True, timeout=300, cwd=tmp_path, check=False)

    strict = run("--lr=3", "--strict")
    assert strict.returncode == 1 and "argv ['--lr=3']" in strict.stdout, strict.stderr
    passed = run("--lr=3", "--", "--strict")
    assert passed.returncode == 0 and "argv ['--lr=3', '--strict']" in passed.stdout, passed.stderr
