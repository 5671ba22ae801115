"""The torch-free CLI (the pre-commit install: torch absent): every command and help path works or says
"this command needs torch: pip install torch", never a ModuleNotFoundError traceback. torch is blocked by
a meta-path finder installed from a sitecustomize, as in an environment where it is not installed."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from torch_fl.cli import COMMANDS, TORCH_FREE

ROOT = Path(__file__).resolve().parents[1]
NEEDS_TORCH = "this command needs torch: pip install torch"

BLOCKER = ROOT / "scripts" / "no_torch"  # its sitecustomize blocks torch

_RUNNER = """
import contextlib, io, json, sys
sys.path.insert(0, {src!r})
import _torch_fl_cli
results = []
for argv in json.loads(sys.argv[1]):
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            rc = _torch_fl_cli.main(argv)
        except SystemExit as exc:
            rc = exc.code if isinstance(exc.code, int) else 1
        except BaseException as exc:
            import traceback
            traceback.print_exc(file=err)
            rc = "raised"
    results.append({{"argv": argv, "rc": rc, "out": out.getvalue(), "err": err.getvalue()}})
results.append({{"torch_imported": "torch" in sys.modules and sys.modules["torch"] is not None}})
print("RESULTS " + json.dumps(results))
"""


def _run_without_torch(tmp_path: Path, argvs: list[list[str]]) -> list[dict]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("FL_")}
    env["PYTHONPATH"] = str(BLOCKER)
    done = subprocess.run([sys.executable, "-c", _RUNNER.format(src=str(ROOT / "src")), json.dumps(argvs)],
                          env=env, cwd=tmp_path, capture_output=True, text=True, timeout=120)
    line = next((x for x in done.stdout.splitlines() if x.startswith("RESULTS ")), None)
    assert line is not None, done.stdout[-2000:] + done.stderr[-2000:]
    *results, last = json.loads(line[len("RESULTS "):])
    assert last == {"torch_imported": False}
    return results


def test_the_blocker_really_blocks_torch(tmp_path):
    done = subprocess.run([sys.executable, "-c", "import torch"], env={**os.environ, "PYTHONPATH": str(BLOCKER)},
                          capture_output=True, text=True, timeout=60)
    assert "ModuleNotFoundError: No module named 'torch'" in done.stderr


def test_every_command_and_help_path_without_torch(tmp_path):
    script = tmp_path / "train.py"
    script.write_text("import torch\nx = torch.zeros(3).cuda()\n")
    argvs = [["--help"], ["--version"], []]
    for name in COMMANDS:
        argvs += [[name, "--help"], [name]]
    argvs += [["scan", str(script)], ["fix", "--diff", str(script)], ["describe", "cpu"], ["doctor", "--json"],
              ["run", "-m", "json.tool"], ["cache", "info"]]
    results = _run_without_torch(tmp_path, argvs)
    for result in results:
        argv, rc, text = result["argv"], result["rc"], result["out"] + result["err"]
        assert "Traceback" not in text and "internal error" not in text, (argv, text[-1500:])
        assert rc != "raised", argv
        command = next((a for a in argv if not a.startswith("-")), None)
        if argv in (["--help"], ["--version"]) or (command and "--help" in argv):
            assert rc == 0 and NEEDS_TORCH not in text, (argv, text[-500:])  # every help works without torch
        elif command in TORCH_FREE:
            assert NEEDS_TORCH not in text, (argv, text[-500:])
        elif (command is not None and len(argv) > 1) or command in ("describe", "doctor", "bugreport"):
            assert rc in (1, 2) and (NEEDS_TORCH in text or "usage:" in text), (argv, text[-500:])
    by_argv = {tuple(r["argv"]): r for r in results}
    assert by_argv[("--version",)]["out"].startswith("torch-fl ")
    assert "usage: torchfl" in by_argv[("--help",)]["out"]
    assert "FL102" in by_argv[("scan", str(script))]["out"]
    assert by_argv[("doctor", "--json")]["err"].strip() == f"torchfl doctor: {NEEDS_TORCH}"
    assert by_argv[("describe", "cpu")]["err"].strip() == f"torchfl describe: {NEEDS_TORCH}"


@pytest.mark.parametrize("argv", [["run", "-m", "no_such_module_fl"], ["run", "-m", "json"]])
def test_run_a_missing_module_is_one_line(argv, capsys, tmp_path, monkeypatch):
    from torch_fl.cli import main

    monkeypatch.chdir(tmp_path)
    assert main(argv) == 1
    err = capsys.readouterr().err
    assert "Traceback" not in err and "runpy" not in err
    assert err.startswith(f"torchfl run: -m {argv[-1]}: No module named ") and "Fix: check the name" in err


def test_run_a_module_that_raises_still_shows_its_traceback(capsys, tmp_path, monkeypatch):
    from torch_fl.cli import main

    (tmp_path / "broken_mod_fl.py").write_text("import no_such_dependency_fl\n")
    monkeypatch.chdir(tmp_path)
    assert main(["run", "-m", "broken_mod_fl"]) == 1
    err = capsys.readouterr().err
    assert 'broken_mod_fl.py", line 1' in err and "No module named 'no_such_dependency_fl'" in err
    assert "runpy" not in err
