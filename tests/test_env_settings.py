"""One settings layer: the environment, the project config and the user config go through the same parser
and checks (torch_fl._env), each value says where it came from, and numbers are ASCII and bounded."""

from __future__ import annotations

import json
import logging
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

import torch_fl
from torch_fl import _env, _logging
from torch_fl.errors import ConfigError


def _project(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "torch_fl.toml"
    path.write_text(text, encoding="utf-8")
    os.chdir(tmp_path)
    torch_fl.reset()
    return path


# The same checks in a file as in the environment ---------------------------------------------------
def test_routes_in_a_config_file_meet_fl_route_checks(tmp_path):
    path = _project(tmp_path, '[routes]\n"aten::gleu" = "translate"\n')
    with pytest.raises(ConfigError) as info:
        torch_fl.route_table("cpu")
    assert str(info.value).startswith(f"{path}: routes: 'aten::gleu' is not an aten operator of this torch. "
                                      "Did you mean 'aten::gelu'?")
    _project(tmp_path, '[routes]\n"aten::gelu" = "fallbak"\n')
    with pytest.raises(ConfigError, match="Did you mean 'fallback'"):
        torch_fl.route_table("cpu")


def test_a_relative_path_in_a_config_file_is_relative_to_the_file(tmp_path, monkeypatch):
    monkeypatch.delenv("FL_CACHE_DIR")  # (the test session points it at a temporary folder)
    _project(tmp_path, 'cache_dir = "build/cache"\n')
    (tmp_path / "src").mkdir()
    monkeypatch.chdir(tmp_path / "src")                  # the project file is found from a subfolder
    assert _env.FL_CACHE_DIR.value() == tmp_path / "build" / "cache"
    monkeypatch.setenv("FL_CACHE_DIR", "here")           # the variable's own relative path: the cwd's
    assert _env.FL_CACHE_DIR.value() == Path("here")


def test_log_in_a_config_file_is_checked_and_applied(tmp_path):
    _project(tmp_path, 'log = "dispach=DEBUG"\n')
    with pytest.raises(ConfigError, match=r"torch_fl.toml: log: 'dispach' is not a torch_fl logger.*Did you "
                                          r"mean 'dispatch'\?"):
        _logging.configure(strict=True)
    _project(tmp_path, 'log = "dispatch=DEBUG"\n')
    try:
        assert _logging.configure(strict=True) == {"torch_fl.dispatch": logging.DEBUG}
        assert logging.getLogger("torch_fl.dispatch").isEnabledFor(logging.DEBUG)
    finally:
        logging.getLogger("torch_fl.dispatch").setLevel(logging.NOTSET)


@pytest.mark.slow
def test_log_in_a_config_file_is_applied_at_import(tmp_path):
    (tmp_path / "torch_fl.toml").write_text('log = "dispatch=DEBUG"\n')
    env = {k: v for k, v in os.environ.items() if not k.startswith("FL_")}
    done = subprocess.run([sys.executable, "-c", "import logging, torch_fl; "
                           "print(logging.getLogger('torch_fl.dispatch').getEffectiveLevel())"],
                          env=env, cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert done.stdout.strip() == str(logging.DEBUG), done.stderr


def test_device_map_in_a_config_file_is_refused_like_the_variable(tmp_path):
    path = _project(tmp_path, 'device_map = { acc01 = "cpu" }\n')
    with pytest.raises(ConfigError, match=f"{path}: device_map: 'acc01' is not a virtual id like acc0"):
        torch_fl.devices()
    with pytest.raises(ConfigError, match="FL_DEVICE_MAP: 'acc01' is not a virtual id like acc0"):
        _env.FL_DEVICE_MAP.parse("acc01=cpu")


@pytest.mark.parametrize(("text", "expect"), [
    ('fallback = "eror"\n', "fallback: 'eror' is not one of: warn, error. Did you mean 'error'?"),
    ("cache_keep = 0\n", "cache_keep: '0' is not a whole number >= 1"),
    ('cache_keep = "١٠"\n', "cache_keep: '١٠' is not a whole number >= 1 (at most 1000, in ASCII digits"),
    ("emu_devices = 99999999999999999999.0\n", "emu_devices: '1e+20' is not a whole number >= 1"),
    ("collective_timeout = 1e308\n", "collective_timeout: '1e+308' is not a number of seconds >= 0"),
    ("preflight = 3\n", "preflight: '3' is neither on"),
    ("device = [1]\n", "device: must be a string (the syntax of FL_DEVICE), got list [1]"),
    ('devcie = "acc0"\n', "unknown key 'devcie'. Did you mean 'device'?"),
])
def test_every_key_has_its_variables_checks_and_doctor_reports_it(tmp_path, text, expect):
    from torch_fl.analysis import doctor

    _project(tmp_path, text)
    messages = [str(exc) for exc in _env.problems()]
    assert any(expect in m for m in messages), messages
    assert any(expect in p for p in doctor.diagnose(doctor.collect())), expect


def test_a_missing_fl_config_file_is_an_error(tmp_path, monkeypatch):
    monkeypatch.setenv("FL_CONFIG", str(tmp_path / "nope.toml"))
    with pytest.raises(ConfigError, match=r"FL_CONFIG: .*nope.toml does not exist; it names the user config"):
        torch_fl.device()
    monkeypatch.setenv("FL_CONFIG", str(tmp_path))
    with pytest.raises(ConfigError, match="is a folder; it names the user config file"):
        torch_fl.device()


# Where each value came from -------------------------------------------------------------------------
def test_each_value_says_where_it_came_from_and_doctor_shows_it(tmp_path, monkeypatch, capsys):
    from torch_fl.cli import main

    user = tmp_path / "user.toml"
    user.write_text('fallback = "error"\ncache_keep = 7\n')
    monkeypatch.setenv("FL_CONFIG", str(user))
    (tmp_path / "proj").mkdir()
    project = _project(tmp_path / "proj", "cache_keep = 5\n")
    monkeypatch.setenv("FL_EMU_DEVICES", "2")
    assert _env.FL_CACHE_KEEP.resolve() == (5, str(project), "project config", "5")
    assert _env.FL_FALLBACK.resolve() == ("error", str(user), "user config", "error")
    assert _env.FL_EMU_DEVICES.resolve() == (2, "FL_EMU_DEVICES", "environment", "2")
    assert _env.FL_PREFLIGHT.resolve() == (True, "default", "default", "1")
    assert main(["doctor", "--json"]) in (0, 1)
    settings = {item["name"]: item for item in json.loads(capsys.readouterr().out)["settings"]}
    assert settings["FL_CACHE_KEEP"] == {"name": "FL_CACHE_KEEP", "key": "cache_keep", "value": "5",
                                         "source": str(project), "kind": "project config"}
    assert settings["FL_FALLBACK"]["kind"] == "user config"
    assert settings["FL_EMU_DEVICES"]["source"] == "FL_EMU_DEVICES"
    main(["doctor"])
    text = capsys.readouterr().out
    assert f"FL_CACHE_KEEP: 5 (from {project}, project config)" in " ".join(text.split())


# Numbers --------------------------------------------------------------------------------------------
@pytest.mark.parametrize("text", ["99999999999999999999", str(10**9), "1025", "١٠", "1_0", "+2", " 2 3", "0x2",
                                  "2.0", "0"])
def test_emulated_device_count_is_ascii_and_bounded(text, monkeypatch):
    monkeypatch.setenv("FL_EMU_DEVICES", text)
    with pytest.raises(ConfigError, match=r"FL_EMU_DEVICES: .* is not a whole number >= 1 \(at most 1024, in "
                                          r"ASCII digits"):
        _env.FL_EMU_DEVICES.value()


@pytest.mark.slow
def test_huge_emulated_device_count_at_import_is_no_traceback(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith("FL_")}
    env.update(FL_EMU_DEVICES="99999999999999999999", FL_DEVICE="emu:cpu")
    done = subprocess.run([sys.executable, "-c", "import torch, torch_fl; torch.fl.device()"], env=env,
                          cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert "OverflowError" not in done.stderr and "MemoryError" not in done.stderr
    assert "FL_EMU_DEVICES: '99999999999999999999' is not a whole number >= 1 (at most 1024" in done.stderr


@pytest.mark.parametrize(("text", "value"), [("0", 0.0), ("2.5", 2.5), (".5", 0.5), ("604800", 604800.0)])
def test_collective_timeout_takes_plain_decimals(text, value):
    assert _env.FL_COLLECTIVE_TIMEOUT.parse(text) == value


def test_cache_keep_bound(monkeypatch):
    assert _env.FL_CACHE_KEEP.parse("1000") == 1000
    with pytest.raises(ConfigError, match="at most 1000"):
        _env.FL_CACHE_KEEP.parse("1001")


@pytest.mark.parametrize("text", ["١٠", "1_0", "+2", " 2", "0", str(10**6 + 1), "9" * 40, "2.0"])
def test_cli_counts_are_ascii_and_bounded(text):
    import argparse

    from torch_fl.cli import positive_int

    with pytest.raises(argparse.ArgumentTypeError, match=rf"must be a whole number >= 1, got '{re.escape(text)}' "
                                                         r"\(at most 1000000, in ASCII digits\)"):
        positive_int(text)
    assert positive_int("8") == 8


@pytest.mark.parametrize(("argv", "message"), [
    (["bench", "m.py:f", "--steps", "0"], "argument --steps: must be a whole number >= 1, got '0'"),
    (["bench", "m.py:f", "--warmup", "-1"], "argument --warmup: must be a whole number >= 0, got '-1'"),
    (["grade", "m.py:f", "--steps", "١٠"], "argument --steps: must be a whole number >= 1, got '١٠'"),
    (["grade", "m.py:f", "--warmup", "1_0"], "argument --warmup: must be a whole number >= 0, got '1_0'"),
    (["grade", "m.py:f", "--steps", "99999999"], "(at most 1000000, in ASCII digits)"),
])
def test_bench_and_grade_step_counts_are_ascii_and_bounded(argv, message, capsys):
    from torch_fl.cli import main

    with pytest.raises(SystemExit) as stop:
        main(argv)
    assert stop.value.code == 2
    assert message in capsys.readouterr().err


def test_warmup_may_be_zero():
    from torch_fl.cli import non_negative_int

    assert non_negative_int("0") == 0
    assert non_negative_int("3") == 3


@pytest.mark.parametrize("text", ["1e308", "inf", "nan", "٣", "604801", "0", "-1"])
def test_cli_seconds_are_ascii_and_bounded(text):
    import argparse

    from torch_fl.cli import positive_seconds

    with pytest.raises(argparse.ArgumentTypeError, match="must be a number of seconds > 0"):
        positive_seconds(text)
    assert positive_seconds("2.5") == 2.5


@pytest.mark.parametrize(("text", "why"), [("８x64", "is not a shape like 8x64"), ("٨x64", "is not a shape"),
                                           ("9999999x9999999", "more than the 2,147,483,648")])
def test_warmup_shapes_are_ascii_and_bounded(text, why):
    import torch

    from torch_fl.compiler.warmup import parse_shapes
    from torch_fl.errors import TorchFLError

    with pytest.raises(TorchFLError, match=why):
        parse_shapes([text], (torch.ones(2, 4),))
    assert parse_shapes(["8x64"], (torch.ones(2, 4),)) == [((8, 64),)]


def test_preflight_rank_count_is_bounded(capsys):
    from torch_fl.cli import main

    with pytest.raises(SystemExit) as info:
        main(["preflight", "--nproc", "100000"])
    assert info.value.code == 2
    assert "argument --nproc: must be a whole number >= 1, got '100000' (at most 1024)" in capsys.readouterr().err
