"""One meaning of --json in every command (cli/args.add_json, cli/output.emit): FILE gets the JSON next to
the printed text; --json alone (or -) prints the JSON instead of the text."""

from __future__ import annotations

import argparse
import io
import json
from pathlib import Path

import pytest

from torch_fl.cli import main
from torch_fl.cli.args import STDOUT, add_json
from torch_fl.cli.output import emit
from torch_fl.report import Report, Section, Table

MODEL = '''\
import torch


def factory():
    return torch.nn.Linear(4, 2), (torch.randn(3, 4),), None
'''


def _report() -> Report:
    return Report("a title", {"answer": 42}, sections=[Section("numbers", tables=[Table(["a"], [[1]])])])


def test_emit_prints_the_text_and_writes_the_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    target = tmp_path / "r.json"
    out = io.StringIO()
    emit(_report(), json_path=str(target), stream=out)
    assert "a title" in out.getvalue() and "numbers" in out.getvalue()
    assert json.loads(target.read_text(encoding="utf-8")) == {"answer": 42}


def test_emit_json_alone_prints_only_the_json() -> None:
    out = io.StringIO()
    emit(_report(), json_path=STDOUT, stream=out)
    assert json.loads(out.getvalue()) == {"answer": 42}


@pytest.mark.parametrize(("argv", "expected"), [
    ([], None), (["--json"], STDOUT), (["--json", "-"], STDOUT), (["--json", "f.json"], "f.json"),
    (["--json=f.json"], "f.json"), (["--json", "--other"], STDOUT),
])
def test_the_flag_parses_the_same_everywhere(argv: list[str], expected: str | None) -> None:
    parser = argparse.ArgumentParser()
    add_json(parser)
    parser.add_argument("--other", action="store_true")
    assert parser.parse_args(argv).json == expected


def test_every_json_flag_of_every_command_takes_an_optional_file() -> None:
    from torch_fl.cli import COMMANDS, build_parser

    def walk(parser: argparse.ArgumentParser, path: str) -> list[str]:
        wrong = []
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for name, sub in action.choices.items():
                    wrong += walk(sub, f"{path} {name}")
            elif "--json" in action.option_strings and (action.nargs != "?" or action.const != STDOUT):
                wrong.append(path)
        return wrong

    found = [path for name in COMMANDS for path in walk(build_parser([name]), "torchfl")]
    assert found == []


def test_coverage_json_alone_is_the_json_on_stdout(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "lin.py").write_text(MODEL, encoding="utf-8")
    spec = f"{tmp_path / 'lin.py'}:factory"
    assert main(["coverage", spec, "--device", "cuda", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["ops"]
    target = tmp_path / "c.json"
    assert main(["coverage", spec, "--device", "cuda", "--json", str(target)]) == 0
    assert not capsys.readouterr().out.lstrip().startswith("{")  # the text, with the file beside it
    assert json.loads(target.read_text(encoding="utf-8"))["ops"] == data["ops"]
