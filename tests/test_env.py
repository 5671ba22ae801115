"""The typed FL_* layer (torch_fl._env): one declaration per variable, one parser, errors that name the
variable, the value, what is allowed and a did-you-mean; callers and doctor use the same code."""

from __future__ import annotations

import logging
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import torch_fl
from torch_fl import _env, _logging
from torch_fl.errors import ConfigError

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src" / "torch_fl"


def _error(name: str, text: str) -> str:
    with pytest.raises(ConfigError) as info:
        _env.BY_NAME[name].parse(text)
    return str(info.value)


# The table ----------------------------------------------------------------------------------------
def test_each_variable_is_declared_once_with_type_default_and_doc():
    names = [var.name for var in _env.ALL]
    assert len(names) == len(set(names))
    declared = {m.group(1) for m in re.finditer(r'^(FL_\w+) = EnvVar\(', (SRC / "_env.py").read_text(), re.M)}
    assert declared == set(names), "a variable declared but not in ALL (or the reverse)"
    for var in _env.ALL:
        assert var.name.startswith("FL_") and var.type and var.help and var.parser is not None
        if var.default:
            var.parse(var.default)  # every default is a valid value of its own type


def test_fl_variables_are_read_only_through_the_table():
    # os.environ reads of FL_* anywhere else would be a second parser; the tiny alias entry point is the
    # one exception (it must not import torch_fl while torch is still importing).
    offenders = []
    for path in SRC.rglob("*.py"):
        if path.name == "_env.py":
            continue
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if re.search(r"(environ(\.get)?[\[(]|getenv\()\s*['\"]FL_", line):
                offenders.append(f"{path.relative_to(ROOT)}:{number}: {line.strip()}")
    assert offenders == []


def test_docs_env_table_is_generated_from_the_table():
    text = (ROOT / "docs" / "env.md").read_text(encoding="utf-8")
    assert _env.markdown_table() in text, "regenerate: python -c 'from torch_fl import _env; " \
                                          "print(_env.markdown_table())'"


def test_loggers_list_matches_the_loggers_in_the_source():
    used = set()
    for path in SRC.rglob("*.py"):
        used |= set(re.findall(r'getLogger\("torch_fl\.(\w+)', path.read_text(encoding="utf-8")))
    assert used == set(_logging.LOGGERS)


# Booleans: one vocabulary -------------------------------------------------------------------------
@pytest.mark.parametrize("name", [v.name for v in _env.ALL if v.type == "bool"])
def test_booleans_share_one_vocabulary(name):
    var = _env.BY_NAME[name]
    for text in ("1", "true", "YES", "On"):
        assert var.parse(text) is True
    for text in ("0", "false", "No", "OFF"):
        assert var.parse(text) is False
    message = _error(name, "treu")
    assert f"{name}: 'treu' is neither on (1, true, yes, on) nor off (0, false, no, off)." in message
    assert "Did you mean 'true'?" in message


# The silently accepted values, now errors ---------------------------------------------------
def test_fallback_typo_is_an_error_not_strict_mode_off():
    assert _env.FL_FALLBACK.parse("error") == "error" and _env.FL_FALLBACK.parse("") == "warn"
    message = _error("FL_FALLBACK", "eror")
    assert message.startswith("FL_FALLBACK: 'eror' is not one of: warn, error. Did you mean 'error'?")
    assert "Fix: correct or unset FL_FALLBACK (see `torchfl docs env`)." in message


def test_fallback_typo_fails_activation(monkeypatch):
    monkeypatch.setenv("FL_FALLBACK", "eror")
    with pytest.raises(ConfigError, match="FL_FALLBACK: 'eror'"):
        torch_fl.activate("cpu")


def test_unknown_op_in_route_is_an_error_with_did_you_mean():
    message = _error("FL_ROUTE", "aten::gleu=fallback")
    assert message.startswith("FL_ROUTE: 'aten::gleu' is not an aten operator of this torch. "
                              "Did you mean 'aten::gelu'?")
    assert "not an overload of aten::add (its overloads:" in _error("FL_ROUTE", "aten::add.Tensr=fallback")
    assert "Did you mean 'aten::add.Tensor'?" in _error("FL_ROUTE", "aten::add.Tensr=fallback")
    assert "not a route (for aten::gelu); routes: native, translate" in _error("FL_ROUTE", "gelu=fallbak")
    # bare names, the default overload and custom namespaces (registered later) are accepted
    assert _env.FL_ROUTE.parse("gelu=translate,aten::bmm.default=fallback,mylib::op=fallback") == {
        "aten::gelu": "translate", "aten::bmm.default": "fallback", "mylib::op": "fallback"}


def test_route_override_with_unknown_op_fails_where_the_api_reads_it(monkeypatch):
    monkeypatch.setenv("FL_ROUTE", "aten::gleu=fallback")
    with pytest.raises(ConfigError, match="Did you mean 'aten::gelu'"):
        torch_fl.route_table("cpu").route("aten::gelu.default", "float32")


@pytest.mark.parametrize(("name", "text", "key"), [
    ("FL_DEVICE_MAP", "acc0=cpu,acc1=cpu,acc0=meta", "'acc0' twice ('cpu' and 'meta')"),
    ("FL_ROUTE", "aten::gelu=translate,gelu=fallback", "aten::gelu twice"),
    ("FL_LOG", "dispatch=DEBUG,dispatch=INFO", "'dispatch' twice"),
])
def test_duplicate_keys_are_errors(name, text, key):
    message = _error(name, text)
    assert message.startswith(f"{name}: '{text}' is setting {key}")


def test_duplicate_device_map_key_fails_the_api(monkeypatch):
    monkeypatch.setenv("FL_DEVICE_MAP", "acc0=cpu,acc0=meta")
    with pytest.raises(ConfigError, match=r"FL_DEVICE_MAP: .* is setting 'acc0' twice"):
        torch_fl.devices()


def test_unknown_logger_is_an_error_with_did_you_mean():
    assert "not a torch_fl logger; loggers: compile, description" in _error("FL_LOG", "nosuchmodule=DEBUG")
    assert "Did you mean 'dispatch'?" in _error("FL_LOG", "dispach=DEBUG")
    assert "Did you mean 'DEBUG'?" in _error("FL_LOG", "dispatch=DEBG")
    assert _env.FL_LOG.parse("torch_fl.dispatch=debug,compile.jit=INFO") == {
        "torch_fl.dispatch": logging.DEBUG, "torch_fl.compile.jit": logging.INFO}


@pytest.mark.parametrize("text", ["nan", "inf", "-inf", "abc", "-1", "1e400", "1e308", "604801", "٦٠٠", "6_00"])
def test_collective_timeout_rejects_non_finite_negative_huge_and_non_ascii(text):
    assert _error("FL_COLLECTIVE_TIMEOUT", text).startswith(
        f"FL_COLLECTIVE_TIMEOUT: '{text}' is not a number of seconds >= 0 (at most 604800, in ASCII digits; "
        "example: 600; 0 keeps torch's default timeout and turns the watchdog off).")


def test_collective_timeout_through_the_distributed_api(monkeypatch):
    from torch_fl import distributed

    monkeypatch.setenv("FL_COLLECTIVE_TIMEOUT", "nan")
    with pytest.raises(ConfigError, match="FL_COLLECTIVE_TIMEOUT: 'nan'"):
        distributed.collective_timeout()
    monkeypatch.setenv("FL_COLLECTIVE_TIMEOUT", "2.5")
    assert distributed.collective_timeout() == 2.5


@pytest.mark.parametrize("text", ["abc", "0", "-3", "2.5"])
def test_cache_keep_needs_a_whole_number(text, monkeypatch):
    from torch_fl.compiler.cache import keep_count

    monkeypatch.setenv("FL_CACHE_KEEP", text)
    with pytest.raises(ConfigError, match=re.escape(f"FL_CACHE_KEEP: '{text}' is not a whole number >= 1")):
        keep_count()


def test_route_log_folder_must_exist_when_routing_starts(monkeypatch, tmp_path):
    monkeypatch.setenv("FL_ROUTE_LOG", str(tmp_path / "missing" / "log.json"))
    with pytest.raises(ConfigError, match=r"in a folder that does not exist .*mkdir -p"):
        torch_fl.activate("cpu")
    # refused before anything was installed: no router is left behind that no activation could remove
    assert torch_fl.routing.active() is None
    assert not torch._C._dispatch_has_backend_fallback(torch._C.DispatchKey.CPU)
    assert "is a folder; name a file inside it" in _error("FL_ROUTE_LOG", str(tmp_path))


@pytest.mark.slow
def test_route_log_write_failure_at_exit_goes_to_stderr(tmp_path):
    target = tmp_path / "gone" / "log.json"
    target.parent.mkdir()
    code = ("import shutil, sys, torch, torch_fl\n"
            "torch.fl.activate('cpu')\n"
            f"shutil.rmtree({str(target.parent)!r})\n")
    env = {k: v for k, v in __import__("os").environ.items() if not k.startswith("FL_")}
    done = subprocess.run([sys.executable, "-c", code], env={**env, "FL_ROUTE_LOG": str(target)},
                          capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr
    assert f"could not write the route log to {target} (FL_ROUTE_LOG)" in done.stderr
    assert '"records"' in done.stderr  # the log itself is not lost


def test_huge_values_are_shortened_in_messages():
    message = _error("FL_CACHE_KEEP", "x" * 100_000)
    assert "(100000 characters)" in message and len(message) < 600


# FL_LOG at import ---------------------------------------------------------------------------------
@pytest.mark.slow
def test_bad_fl_log_never_breaks_import_or_help(tmp_path):
    env = {k: v for k, v in __import__("os").environ.items() if not k.startswith("FL_")}
    env["FL_LOG"] = "garbage"
    done = subprocess.run([sys.executable, "-m", "torch_fl", "--help"], env=env, capture_output=True,
                          text=True, timeout=120, cwd=tmp_path)
    assert done.returncode == 0 and "usage: torchfl" in done.stdout
    assert "Traceback" not in done.stderr
    assert "FL_LOG: 'garbage' is not a log level" in done.stderr and "The log levels are ignored until then" in done.stderr


def test_configure_strict_raises_and_lenient_warns(caplog):
    with pytest.raises(ConfigError):
        _logging.configure("garbage", strict=True)
    assert _logging.configure("garbage") == {}


# doctor and the API agree -------------------------------------------------------------------------
BAD_VALUES = {
    "FL_FALLBACK": "eror", "FL_ROUTE": "aten::gleu=fallback", "FL_DEVICE_MAP": "acc0=cpu,acc0=cpu",
    "FL_LOG": "nosuchmodule=DEBUG", "FL_CACHE_KEEP": "abc", "FL_COLLECTIVE_TIMEOUT": "abc",
    "FL_PREFLIGHT": "maybe", "FL_CUDA_ALIAS": "perhaps", "FL_ROUTE_LOG": "/nonexistent-folder-fl/x.json",
    "FL_EMU_DEVICES": "0", "FL_SANITIZE": "stream", "FL_RANK_DEVICES": "node1=emu:npu",
}


def test_every_typed_variable_has_a_bad_value_case():
    assert set(BAD_VALUES) == {v.name for v in _env.ALL if v.type not in ("path", "paths", "device",
                                                                          "description name")}


@pytest.mark.parametrize(("name", "text"), sorted(BAD_VALUES.items()))
def test_doctor_reports_what_the_api_rejects(name, text, monkeypatch):
    from torch_fl.analysis import doctor

    monkeypatch.setenv(name, text)
    with pytest.raises(ConfigError) as info:
        _env.BY_NAME[name].value()
    data = doctor.collect()
    problems = doctor.diagnose(data)
    assert any(str(info.value).rstrip(".") in p for p in problems), problems
    assert _env.problems() and str(_env.problems()[0]) == str(info.value)


def test_unknown_fl_variables_are_doctor_warnings(monkeypatch):
    from torch_fl.analysis import doctor

    monkeypatch.setenv("FL_DEVCE", "acc0")
    assert _env.unknown() == ["FL_DEVCE is set but torch-fl reads no such variable. Did you mean 'FL_DEVICE'?"]
    assert "FL_DEVCE is set but torch-fl reads no such variable. Did you mean 'FL_DEVICE'?" in \
        doctor.cautions(doctor.collect())



@pytest.mark.parametrize("kwargs", [{"preflight_timeout": -1.0}, {"preflight_timeout": float("nan")},
                                    {"timeout": -5.0}, {"timeout": float("inf")}])
def test_init_process_group_rejects_bad_waits_before_blaming_the_network(kwargs):
    from torch_fl import distributed

    with pytest.raises(ValueError, match=r"is not a number of seconds"):
        distributed.init_process_group("gloo", world_size=1, rank=0, **kwargs)


@pytest.mark.slow
def test_nothing_that_can_fail_is_parsed_when_the_cli_starts(tmp_path):
    env = {k: v for k, v in __import__("os").environ.items() if not k.startswith("FL_")}
    env.update(BAD_VALUES)
    env["FL_LOG"] = "garbage"
    # FL_CUDA_ALIAS acts while `import torch` runs (the alias entry point, tests/migrate/test_alias.py)
    del env["FL_CUDA_ALIAS"]
    for argv in (["--help"], ["--version"], ["doctor", "--help"]):
        done = subprocess.run([sys.executable, "-m", "torch_fl", *argv], env=env, capture_output=True,
                              text=True, timeout=120, cwd=tmp_path)
        assert done.returncode == 0, done.stderr
        assert "Traceback" not in done.stderr


# Found by tests/test_env_fuzz.py ------------------------------------------------------------------------
def test_over_long_path_is_a_config_error_not_an_oserror(monkeypatch):
    assert "is too long to be a path (at most 255 bytes per name" in _error("FL_DESCRIPTION", "a" * 300)
    monkeypatch.setenv("FL_DESCRIPTION", "a" * 100_000)
    with pytest.raises(ConfigError, match=r"FL_DESCRIPTION: 'a+\.\.\. \(100000 characters\)' is too long"):
        torch_fl.device()


@pytest.mark.parametrize("text", [".", "./", "/"])
def test_path_without_a_name_does_not_crash_doctor(text, monkeypatch):
    from torch_fl.analysis import doctor

    monkeypatch.setenv("FL_DESCRIPTION", text)
    data = doctor.collect()  # a folder is not a description file: reported, not raised
    assert data["errors"] and "description" in str(data["errors"]).lower()


def test_absurd_device_values_stop_in_the_env_layer(monkeypatch):
    from torch_fl.analysis import doctor

    assert "is not a device (a virtual id such as acc0" in _error("FL_DEVICE", "9" * 5000)
    monkeypatch.setenv("FL_DEVICE", "acc" + "9" * 5000)  # int() of it used to be a ValueError traceback
    problems = doctor.diagnose(doctor.collect())
    assert any("is not a device" in p for p in problems), problems
