"""One top-level CLI handler: user errors are one message (rc 2 for bad input, 1 for a failure), never a
traceback; a traceback only with --debug or FL_LOG=DEBUG; a bug says so and points at `torchfl bugreport`."""

from __future__ import annotations

import logging
import os

import pytest

import torch_fl
from torch_fl import _toml
from torch_fl.cli import describe as describe_cmd
from torch_fl.cli import main, report_error, user_error_text
from torch_fl.description import registry
from torch_fl.errors import ConfigError


def _boom(exc: BaseException):
    def run(args):
        raise exc
    return run


@pytest.mark.parametrize(("exc", "text"), [
    (ConfigError("FL_X: 'y' is bad."), "torchfl describe: error: FL_X: 'y' is bad."),
    (FileNotFoundError(2, "No such file or directory", "/nowhere/x.toml"),
     "torchfl describe: error: /nowhere/x.toml: No such file or directory"),
    (PermissionError(13, "Permission denied", "a.toml", None), "torchfl describe: error: a.toml: Permission denied"),
    (UnicodeDecodeError("utf-8", b"ab\xff", 2, 3, "invalid start byte"),
     "torchfl describe: error: a file is not UTF-8 text: byte 0xff at offset 2 is not utf-8. Fix: save it as UTF-8"),
    (_toml.TOMLDecodeError("Invalid value (at line 3, column 5)"),
     "torchfl describe: error: not valid TOML: Invalid value (at line 3, column 5)"),
])
def test_user_errors_are_one_line_without_traceback(exc, text, monkeypatch, capsys):
    monkeypatch.setattr(describe_cmd, "run", _boom(exc))
    # bad input exits 2 (docs/cli.md, exit status); a file that exists but cannot be read is a failure, 1
    assert main(["describe"]) == (1 if isinstance(exc, PermissionError) else 2)
    err = capsys.readouterr().err
    assert err.strip() == text
    assert "Traceback" not in err


def test_a_bug_says_so_and_points_at_bugreport(monkeypatch, capsys):
    monkeypatch.setattr(describe_cmd, "run", lambda args: _toml.dumps({"x": object()}))  # raises in torch_fl
    assert main(["describe"]) == 1
    err = capsys.readouterr().err
    assert "torchfl describe: internal error: TypeError: cannot write object as TOML" in err
    assert "This is a bug in torch-fl" in err and "torchfl bugreport" in err and "torchfl --debug" in err
    assert "Traceback" not in err


@pytest.mark.parametrize("how", ["--debug", "FL_LOG=DEBUG"])
def test_traceback_with_debug_or_fl_log_debug(how, monkeypatch, capsys):
    monkeypatch.setattr(describe_cmd, "run", _boom(ConfigError("FL_X: bad.")))
    argv = ["describe"]
    if how == "--debug":
        argv.insert(0, "--debug")
    try:
        if how != "--debug":
            logging.getLogger("torch_fl").setLevel(logging.DEBUG)
        assert main(argv) == 2  # a ConfigError: bad input
    finally:
        logging.getLogger("torch_fl").setLevel(logging.WARNING)
    err = capsys.readouterr().err
    assert "Traceback (most recent call last)" in err and err.rstrip().endswith("torchfl describe: error: FL_X: bad.")


def test_user_error_text_is_none_for_bugs():
    assert user_error_text(KeyError("x")) is None
    assert report_error("torchfl x", OSError("disk on fire")) == 1


def test_unreadable_folder_in_description_path_is_reported(monkeypatch, tmp_path, caplog):
    folder = tmp_path / "descs"
    folder.mkdir()
    monkeypatch.setenv("FL_DESCRIPTION_PATH", str(folder))
    real_access = os.access
    # Tests run as root in CI containers, where chmod 000 does not stop reading: simulate the denial.
    monkeypatch.setattr(os, "access", lambda p, mode: False if str(p) == str(folder) else real_access(p, mode))
    torch_fl.reset()
    registry.reload()
    with caplog.at_level(logging.WARNING, logger="torch_fl.description"):
        registry.descriptions()
    assert f"FL_DESCRIPTION_PATH entry {folder} cannot be read (permission denied)" in caplog.text
    assert "chmod u+rx" in caplog.text


def test_shadowed_builtin_is_allowed_and_doctor_warns(monkeypatch, tmp_path):
    from torch_fl.analysis import doctor

    site = tmp_path / "cpu.toml"
    site.write_bytes((registry.BUILTIN_DIR / "cpu.toml").read_bytes())
    monkeypatch.setenv("FL_DESCRIPTION", str(site))
    torch_fl.reset()
    registry.reload()
    assert registry.get("cpu").path == str(site)  # still allowed
    warnings = doctor.cautions(doctor.collect())
    assert any(w.startswith(f"the built-in 'cpu' description is replaced by {site} (FL_DESCRIPTION)")
               for w in warnings), warnings


def test_a_command_module_that_fails_to_import_is_reported_not_raised(monkeypatch, capsys):
    from torch_fl import cli

    monkeypatch.setitem(cli.COMMANDS, "broken", ("nosuch_command_module", "a command whose module is missing"))
    assert main(["broken"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("torchfl broken: internal error: ModuleNotFoundError: No module named")
    assert "Traceback" not in err


def test_an_error_in_the_users_code_is_not_called_a_torch_fl_bug(monkeypatch, capsys, tmp_path):
    model = tmp_path / "model.py"
    model.write_text("def factory():\n    raise ValueError('my model is broken')\n")
    assert main(["warmup", f"{model}:factory"]) == 1
    err = capsys.readouterr().err
    assert err.startswith(f"torchfl warmup: error in your code ({model}, line 2): ValueError: my model is broken")
    assert "bug in torch-fl" not in err and "Traceback" not in err
    model.write_text("def factory(:\n")
    assert main(["warmup", f"{model}:factory"]) == 1
    assert f"error in your code ({model}, line 1): SyntaxError" in capsys.readouterr().err
