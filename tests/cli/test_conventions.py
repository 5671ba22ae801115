"""CLI conventions in every command and every action (issue 42 item 6, issue 43 item 3), checked over the
parsers as they are, so that a new command is checked without being listed: --help, -q and -v; a bad
argument gets the sub-command's own usage and exit status 2; an unknown device exits 2; --json prints JSON
that parses; one exit-code table (cli/exits) documented in docs/cli.md; a missing dependency the same code
everywhere; plural forms."""

from __future__ import annotations

import argparse
import json
import logging
import re
from collections.abc import Callable
from pathlib import Path

import pytest

from torch_fl.cli import COMMANDS, build_parser, main
from torch_fl.cli.exits import EXIT_CODES, MISSING_DEPENDENCY, USAGE, markdown_table

ROOT = Path(__file__).resolve().parents[2]

MODEL = '''\
import torch


def factory():
    return torch.nn.Linear(4, 2), (torch.randn(3, 4),), None
'''


def _parser(argv: list[str]) -> argparse.ArgumentParser:
    """The parser of a command or action: ['cache', 'verify'] -> `torchfl cache verify`'s."""
    parser = build_parser(argv[:1])
    for word in argv:
        action = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
        parser = action.choices[word]
    return parser


def _leaves() -> list[list[str]]:
    """Every command, and every action of a command that has actions (routes show, cache verify, ...)."""
    found = []
    for name in COMMANDS:
        parser = _parser([name])
        actions = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
        found += [[name, action] for action in actions[0].choices] if actions else [[name]]
    return found


def _options(argv: list[str]) -> set[str]:
    return set(_parser(argv)._option_string_actions)


LEAVES = _leaves()
IDS = [" ".join(leaf) for leaf in LEAVES]


@pytest.fixture
def files(tmp_path: Path) -> Callable[[str], str]:
    """Inputs a command reads, made on demand: 'model' (an entry point), 'script', 'lock', 'routelog'."""
    def make(kind: str) -> str:
        if kind == "model":
            (tmp_path / "lin.py").write_text(MODEL, encoding="utf-8")
            return f"{tmp_path / 'lin.py'}:factory"
        if kind == "script":
            (tmp_path / "train.py").write_text("import torch\nx = torch.zeros(3).cuda()\n", encoding="utf-8")
            return str(tmp_path / "train.py")
        if kind == "lock":
            assert main(["env", "lock", "-o", str(tmp_path / "node.lock")]) == 0
            return str(tmp_path / "node.lock")
        if kind == "routelog":
            (tmp_path / "routes.json").write_text(json.dumps({"device": "cpu", "description": "cpu", "records": []}))
            return str(tmp_path / "routes.json")
        raise AssertionError(kind)
    return make


# Each leaf's cheapest real run: its words after the command, "{model}"-style placeholders filled by `files`.
RUNS: dict[str, list[str]] = {
    "describe": ["cpu"], "doctor": [], "bugreport": [], "env lock": ["-o", "-"], "env check": ["{lock}"],
    "env diff": ["{lock}", "{lock}"], "routes show": ["--device", "cpu", "--op", "gelu"],
    "routes diff": ["{routelog}", "{routelog}"], "coverage": ["{model}", "--device", "cuda"],
    "compare": ["{model}", "--device", "cpu"], "bench": ["{model}", "--device", "cpu", "--steps", "1", "--warmup", "0"],
    "profile": ["{model}", "--device", "cpu", "--steps", "1", "--warmup", "0"],
    "ops-bench": ["{model}", "--device", "cpu", "--op", "aten::addmm", "--rounds", "1"],
    "grade": ["{model}", "--device", "cpu", "--no-preflight", "--steps", "1", "--warmup", "0"],
    "scan": ["{script}"], "fix": ["--diff", "{script}"], "audit": ["{model}"], "cache info": [], "cache verify": [],
    "cache clear": ["--stale"], "docs": [], "run": ["{script}"], "warmup": ["{model}", "--device", "cpu"],
    "aot": ["{model}", "--out", "{tmp}/lin.pt2", "--device", "cpu"], "preflight": ["--nproc", "1"],
}
# The option that makes --device count (describe's is the device to --probe).
DEVICE_ONLY_WITH = {"describe": ["--probe"]}
# Runs that compile or start processes (tens of seconds): in the slow set.
SLOW = {"warmup", "aot", "preflight", "run"}


def _run_argv(leaf: list[str], files: Callable[[str], str], tmp_path: Path) -> list[str]:
    words = RUNS[" ".join(leaf)]
    filled = [files(w[1:-1]) if w in ("{model}", "{script}", "{lock}", "{routelog}") else
              w.replace("{tmp}", str(tmp_path)) for w in words]
    return [*leaf, *filled]


def _marked(leaves: list[list[str]]) -> list:
    return [pytest.param(leaf, id=" ".join(leaf), marks=[pytest.mark.slow] if leaf[0] in SLOW else [])
            for leaf in leaves]


def test_every_leaf_has_a_cheap_run() -> None:
    """A new command or action is listed in RUNS, so the tests below cover it."""
    assert sorted(" ".join(leaf) for leaf in LEAVES) == sorted(RUNS)


@pytest.mark.parametrize("argv", LEAVES, ids=IDS)
def test_help_quiet_and_verbose(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        main([*argv, "--help"])
    out = capsys.readouterr().out
    assert info.value.code == 0 and out.startswith(f"usage: torchfl {' '.join(argv)}")
    assert "-q, --quiet" in out and "-v, --verbose" in out
    options = _parser(argv)._option_string_actions
    assert options["-q"].dest == "quiet" and options["-q"].const is True
    assert options["-v"].dest == "verbose" and isinstance(options["-v"], argparse._CountAction)


@pytest.mark.parametrize("argv", LEAVES, ids=IDS)
def test_a_bad_argument_gets_the_subcommands_usage_and_2(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    prog = f"torchfl {' '.join(argv)}"
    with pytest.raises(SystemExit) as info:
        main([*argv, "--no-such-option"])
    err = capsys.readouterr().err
    assert info.value.code == USAGE
    # (a required argument missing is said first; either way the error is this leaf's, under its usage)
    assert err.startswith(f"usage: {prog} ") and f"\n{prog}: error: " in err


@pytest.mark.parametrize("command", [name for name in COMMANDS if [name] not in LEAVES])
def test_a_bad_action_gets_the_commands_usage_and_2(command: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        main([command, "nosuch"])
    err = capsys.readouterr().err
    assert info.value.code == USAGE
    assert err.startswith(f"usage: torchfl {command} ") and f"torchfl {command}: error: argument ACTION: invalid " \
                                                          f"choice: 'nosuch'" in err


@pytest.mark.parametrize("argv", [leaf for leaf in LEAVES if "--device" in _options(leaf)], ids=" ".join)
def test_an_unknown_device_exits_2_in_every_command(argv: list[str], files, tmp_path: Path,
                                                     capsys: pytest.CaptureFixture[str],
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    run = _run_argv(argv, files, tmp_path)
    if "--device" in run:
        run[run.index("--device") + 1] = "nosuch"
    else:  # before the arguments: `run`'s script takes every word after it
        run[len(argv):len(argv)] = ["--device", "nosuch", *DEVICE_ONLY_WITH.get(" ".join(argv), [])]
    assert main(run) == USAGE
    said = capsys.readouterr()
    text = said.out + said.err  # doctor says it in its report
    assert "'nosuch'" in text and "Traceback" not in text and "internal error" not in text


@pytest.mark.parametrize("argv", _marked([leaf for leaf in LEAVES if "--json" in _options(leaf)]))
def test_json_output_parses_and_quiet_prints_no_progress(argv: list[str], files, tmp_path: Path, stderr,
                                                         capsys: pytest.CaptureFixture[str],
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FL_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.chdir(tmp_path)  # whatever a command writes beside its report stays here
    run = _run_argv(argv, files, tmp_path)
    terminal = stderr(tty=True)  # progress lines would show: -q turns them off
    capsys.readouterr()
    code = main([*run, "-q", "--json", "-"])
    findings = argv[0] in ("scan", "fix")  # their 1 is an answer: findings, changes
    assert code == 0 or (findings and code == 1), (code, terminal.getvalue()[-3000:])
    data = json.loads(capsys.readouterr().out)
    assert isinstance(data, (dict, list)) and data
    assert not re.search(r"^\[\d\d:\d\d:\d\d\] ", terminal.getvalue(), re.M), terminal.getvalue()


def test_verbose_turns_torch_fls_log_up_for_the_command(capsys: pytest.CaptureFixture[str]) -> None:
    root = logging.getLogger("torch_fl")
    before = root.level
    try:
        assert main(["docs", "-vv"]) == 0
        assert root.level == logging.DEBUG
        assert main(["docs", "-v"]) == 0
        assert root.level == logging.INFO
    finally:
        root.setLevel(before)
    args = build_parser(["docs"]).parse_args(["docs"])
    assert args.verbose == 0 and args.quiet is False


# One output path ----------------------------------------------------------------------------------
def test_no_command_prints_its_report_by_hand() -> None:
    """stdout belongs to cli/output.emit (a Report's text or JSON); a command prints only messages on stderr.
    Found in the source: a print() without file=, or a write to sys.stdout, outside output.py."""
    import ast

    cli = ROOT / "src" / "torch_fl" / "cli"
    found = []
    for path in sorted(cli.glob("*.py")):
        if path.name in ("output.py", "__init__.py"):  # the emitter; main's --help and error lines
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not isinstance(node, ast.Call):
                continue
            func = node.func
            if isinstance(func, ast.Name) and func.id == "print" and not any(k.arg == "file" for k in node.keywords):
                found.append(f"{path.name}:{node.lineno} print()")
            if isinstance(func, ast.Attribute) and ast.unparse(func) in ("sys.stdout.write", "sys.stdout.writelines"):
                found.append(f"{path.name}:{node.lineno} {ast.unparse(func)}")
    assert found == []


# One exit-code table ------------------------------------------------------------------------------
def test_the_exit_code_table_is_the_one_docs_cli_prints() -> None:
    text = (ROOT / "docs" / "cli.md").read_text(encoding="utf-8")
    assert markdown_table() in text
    assert [entry.code for entry in EXIT_CODES] == sorted({entry.code for entry in EXIT_CODES})


def test_a_missing_dependency_is_the_same_code_for_torch_and_libcst(files, monkeypatch: pytest.MonkeyPatch,
                                                                    capsys: pytest.CaptureFixture[str]) -> None:
    from torch_fl.cli import report_error
    from torch_fl.migrate import fix as fixmod

    assert report_error("torchfl grade", ModuleNotFoundError("No module named 'torch'", name="torch")) \
        == MISSING_DEPENDENCY
    assert capsys.readouterr().err == "torchfl grade: this command needs torch: pip install torch\n"
    monkeypatch.setattr(fixmod, "have_libcst", lambda: False)
    assert main(["fix", files("script")]) == MISSING_DEPENDENCY
    assert capsys.readouterr().err == "torchfl fix: this command needs libcst: pip install 'torch-fl[migrate]'\n"
    # raised from deep inside (fix_paths' own check), the same
    try:
        raise ImportError("torchfl fix needs libcst") from ModuleNotFoundError("libcst", name="libcst")
    except ImportError as exc:
        assert report_error("torchfl fix", exc) == MISSING_DEPENDENCY


@pytest.mark.parametrize(("argv", "usage", "message"), [
    (["env", "diff", "a.lock"], "usage: torchfl env diff", "give at least two lock files"),
    (["aot", "--sha256", "00"], "usage: torchfl aot", "--sha256 goes with --check FILE"),
    (["describe", "--list", "--as", "x"], "usage: torchfl describe", "--as renames a copy"),
    (["run"], "usage: torchfl run", "give a script"),
    (["ops-bench", "--device", "cpu", "--prefer"], "usage: torchfl ops-bench", "give --overlay FILE too"),
    (["compare", "m.py:f", "--device", "cpu", "--rtol", "nan"], "usage: torchfl compare",
     "--rtol must be a finite number >= 0, got nan"),
])
def test_options_that_do_not_go_together_get_the_usage_and_2(argv, usage, message, capsys) -> None:
    try:
        code = main(argv)
    except SystemExit as exc:  # argparse's own (a bad value)
        code = exc.code
    err = capsys.readouterr().err
    assert code == USAGE and err.startswith(usage) and message in err, err


def test_a_report_that_cannot_be_written_is_bad_input_in_one_line(tmp_path: Path, capsys) -> None:
    target = tmp_path / "no" / "such" / "folder" / "cpu.toml"
    assert main(["describe", "cpu", "-o", str(target)]) == USAGE
    err = capsys.readouterr().err
    assert err.startswith(f"torchfl describe: error: cannot write {target}: No such file or directory")
    assert "Traceback" not in err and err.count("\n") == 1


# Plural forms -------------------------------------------------------------------------------------
def test_counts_read_as_words(files, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("libcst")
    script = files("script")
    assert main(["fix", script]) == 0
    assert capsys.readouterr().out == "Fixed 1 finding in 1 file\n"  # issue 42: "in 1 files"
    assert main(["fix", script]) == 0
    assert capsys.readouterr().out == "Fixed 0 findings in 0 files\n"
    from torch_fl.report import plural

    assert [plural(n, "entry", "entries") for n in (0, 1, 2)] == ["0 entries", "1 entry", "2 entries"]
