"""`torchfl bugreport`: sections, secret redaction, log tail; `_platform` environment detection."""

from __future__ import annotations

from pathlib import Path

import pytest

import torch_fl
from torch_fl._platform import environment_kind
from torch_fl.cli import bugreport, main

HEADINGS = ("## Environment and versions", "## Error log\n", "## Expected vs actual behaviour",
            "## Minimal reproduction")
SECRETS = {"MY_API_KEY": "sk-live-0123456789", "HF_TOKEN": "hf_abcdefghijklmnop",
           "DB_PASSWORD": "correct-horse-battery"}


def _report(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    assert main(["bugreport", *argv]) == 0
    return capsys.readouterr().out


def test_four_sections_in_order(capsys: pytest.CaptureFixture[str]) -> None:
    out = _report(capsys)
    positions = [out.index(heading) for heading in HEADINGS]
    assert positions == sorted(positions)
    assert "FL_LOG=DEBUG python train.py 2> err.log" in out  # how to capture a log
    assert "torch-fl**: " + torch_fl.__version__ in out
    assert "native " in out  # the route summary from doctor


def test_secret_values_are_redacted(capsys: pytest.CaptureFixture[str],
                                    monkeypatch: pytest.MonkeyPatch) -> None:
    for name, value in SECRETS.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("FL_HUB_TOKEN", "fl-token-value-42")
    monkeypatch.setenv("FL_DEVICE", "acc0")
    torch_fl.reset()
    out = _report(capsys)
    for value in [*SECRETS.values(), "fl-token-value-42"]:
        assert value not in out
    assert "FL_HUB_TOKEN=<redacted>" in out
    assert "FL_DEVICE=acc0" in out


def test_log_tail_is_included_and_redacted(capsys: pytest.CaptureFixture[str],
                                           monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("HF_TOKEN", SECRETS["HF_TOKEN"])
    log = tmp_path / "err.log"
    log.write_text("first line, dropped\n"
                   "SECRET_X=abc\n"
                   f"sending header with {SECRETS['HF_TOKEN']}\n"
                   "RuntimeError: something broke ``` here\n", encoding="utf-8")
    out = _report(capsys, "--log", str(log), "--lines", "3")
    assert "lines 2-4 of 4, around the last error line; 1 line before cut." in out
    assert "first line, dropped" not in out
    assert "SECRET_X=<redacted>" in out and "SECRET_X=abc" not in out
    assert SECRETS["HF_TOKEN"] not in out
    assert "RuntimeError: something broke ``` here\n````" in out  # a longer fence survives backticks


def test_output_file(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    target = tmp_path / "report.md"
    assert main(["bugreport", "-o", str(target)]) == 0
    assert capsys.readouterr().out == ""
    assert target.read_text(encoding="utf-8").startswith("# torch-fl bug report")


def test_missing_log_is_an_error(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    assert main(["bugreport", "--log", str(tmp_path / "nope.log")]) == 2
    assert "nope.log" in capsys.readouterr().err


def test_redact_assignments_only_for_secret_names() -> None:
    text = "x=1 API_KEY='a b' db_password=hunter2 FL_DEVICE=acc1"
    assert bugreport.redact(text, environ={}) == (
        "x=1 API_KEY=<redacted> db_password=<redacted> FL_DEVICE=acc1")


def test_relevant_env_covers_known_device_stacks() -> None:
    environ = {"CUDA_HOME": "/usr/local/cuda", "ASCEND_HOME_PATH": "/usr/local/Ascend", "HOME": "/root",
               "FL_LOG": "DEBUG", "PYTHONPATH": "/src", "FL_X_SECRET": "s", "FAKE_VISIBLE": "0"}
    shown = bugreport.relevant_env(environ, visible_env="FAKE_VISIBLE")
    assert shown == {"ASCEND_HOME_PATH": "/usr/local/Ascend", "CUDA_HOME": "/usr/local/cuda",
                     "FAKE_VISIBLE": "0", "FL_LOG": "DEBUG", "FL_X_SECRET": "<redacted>",
                     "PYTHONPATH": "/src"}


# _platform ----------------------------------------------------------------------------------------
def _machine(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    return root


@pytest.mark.parametrize(("files", "environ", "expected"), [
    ({"proc/version": "Linux version 6.8.0-generic"}, {}, "bare metal"),
    ({".dockerenv": ""}, {}, "container (docker)"),
    ({"run/.containerenv": ""}, {}, "container (podman)"),
    ({"proc/1/cgroup": "0::/kubepods/burstable/pod1/abc"}, {}, "container (kubernetes)"),
    ({"proc/1/cgroup": "0::/system.slice/containerd.service"}, {}, "container (containerd)"),
    ({}, {"KUBERNETES_SERVICE_HOST": "10.0.0.1"}, "container (kubernetes)"),
    ({"proc/version": "Linux version 5.15.167.4-microsoft-standard-WSL2"}, {}, "WSL2"),
    ({"proc/version": "Linux version 4.4.0-19041-Microsoft"}, {}, "WSL1"),
    ({".dockerenv": "", "proc/version": "5.15.0-microsoft-standard-WSL2"}, {},
     "container (docker) on WSL2"),
])
def test_environment_kind(tmp_path: Path, files: dict[str, str], environ: dict[str, str],
                          expected: str) -> None:
    assert environment_kind(_machine(tmp_path, files), environ) == expected
