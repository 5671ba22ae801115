"""`torchfl bugreport` as the four parts of a good report (issue 42 item 2): the log around its last error
(saying what was cut), every framework's version and how torch-fl was installed, emulation named as such,
"Actual" from the log's last exception."""

from __future__ import annotations

import importlib.metadata
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import torch_fl
from torch_fl.cli import bugreport, main

TRACEBACK = ['Traceback (most recent call last):', '  File "/srv/proj/train.py", line 40, in <module>',
             "    main()", '  File "/srv/proj/train.py", line 30, in main', "    loss.backward()",
             "RuntimeError: CUDA error: device-side assert triggered"]


def _report(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    assert main(["bugreport", *argv]) == 0
    return capsys.readouterr().out


def test_the_excerpt_is_the_lines_around_the_last_traceback_not_the_tail() -> None:
    lines = [f"INFO step {i}" for i in range(200)] + TRACEBACK + [f"INFO shutdown {i}" for i in range(120)]
    kept, note = bugreport.excerpt(lines, 30)
    assert len(kept) == 30
    assert kept[kept.index(TRACEBACK[0]):kept.index(TRACEBACK[-1]) + 1] == TRACEBACK  # the whole traceback
    assert "INFO shutdown 119" not in kept and "INFO step 0" not in kept
    # 5 lines before the traceback, 5 after, and the 14 to spare: two thirds before, the rest after
    assert note == "lines 187-216 of 326, around the last traceback; 186 lines before cut; 110 lines after cut"


def test_a_long_traceback_keeps_its_head_and_its_exception_and_says_how_much_was_cut() -> None:
    frames = [f'  File "m{i}.py", line {i}, in f{i}' for i in range(100)]
    lines = ["INFO start", TRACEBACK[0], *frames, "ValueError: bad shape"]
    kept, note = bugreport.excerpt(lines, 30)
    assert len(kept) == 31  # 30 lines and the marker
    assert kept[1] == TRACEBACK[0] and kept[-1] == "ValueError: bad shape"
    marker = next(line for line in kept if line.startswith("[..."))
    cut = int(marker.split()[1])
    assert marker == f"[... {cut} lines of the traceback cut ...]" and f"{cut} lines of the traceback cut" in note
    assert cut == len(lines) - 30


def test_the_last_of_several_errors_is_the_one_shown() -> None:
    lines = ["ERROR first failure", *[f"INFO {i}" for i in range(100)], "RuntimeError: the second one",
             *[f"INFO after {i}" for i in range(3)]]
    kept, _ = bugreport.excerpt(lines, 10)
    assert "RuntimeError: the second one" in kept and "ERROR first failure" not in kept
    assert kept[-1] == "INFO after 2"


def test_a_log_without_errors_gives_its_last_lines_and_says_so() -> None:
    kept, note = bugreport.excerpt([f"INFO {i}" for i in range(50)], 30)
    assert kept == [f"INFO {i}" for i in range(20, 50)]
    assert note == "the last 30 of 50 lines (no error or traceback found)"


def test_last_exception_is_python_s_exception_line() -> None:
    lines = ["ERROR upload", *TRACEBACK, "INFO cleanup", "torch.OutOfMemoryError: CUDA out of memory.", "bye"]
    assert bugreport.last_exception(lines) == "torch.OutOfMemoryError: CUDA out of memory."
    assert bugreport.last_exception(["INFO all good", "Error rates are fine"]) == ""


def test_the_report_fills_actual_from_the_log_and_cuts_around_the_error(capsys, tmp_path: Path) -> None:
    log = tmp_path / "err.log"
    log.write_text("\n".join([*(f"INFO step {i}" for i in range(300)), *TRACEBACK,
                              *(f"INFO shutdown {i}" for i in range(200))]) + "\n", encoding="utf-8")
    out = _report(capsys, "--log", str(log))
    assert "**Actual:** `RuntimeError: CUDA error: device-side assert triggered`" in out
    section = out.split("## Error log", 1)[1].split("## Expected", 1)[0]
    assert "around the last traceback" in section and "before cut" in section and "after cut" in section
    assert "\n".join(TRACEBACK[1:]) in section
    assert "INFO shutdown 199" not in section and "INFO step 0\n" not in section


def test_actual_stays_a_placeholder_without_an_exception(capsys, tmp_path: Path) -> None:
    log = tmp_path / "ok.log"
    log.write_text("INFO fine\n", encoding="utf-8")
    out = _report(capsys, "--log", str(log))
    assert "**Actual:** <!-- what happens instead" in out and "no error or traceback found" in out


def test_framework_versions_from_metadata(capsys) -> None:
    out = _report(capsys)
    line = next(line for line in out.splitlines() if line.startswith("- **frameworks**:"))
    for name in ("numpy", "transformers"):
        try:
            version = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            continue
        assert f"{name} {version}" in line


def _dist(root: Path, name: str, direct_url: dict | None, installer: str = "pip") -> None:
    info = root / f"{name.replace('-', '_')}-1.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n", encoding="utf-8")
    (info / "INSTALLER").write_text(installer + "\n", encoding="utf-8")
    if direct_url is not None:
        (info / "direct_url.json").write_text(json.dumps(direct_url), encoding="utf-8")


@pytest.mark.parametrize(("direct_url", "expected"), [
    ({"url": "file:///src/fl", "dir_info": {"editable": True}}, "editable install of file:///src/fl by pip"),
    ({"url": "file:///src/fl", "dir_info": {}}, "from a local directory install of file:///src/fl by pip"),
    ({"url": "file:///dl/fl_probe-1.0-py3-none-any.whl", "archive_info": {}},
     "wheel file:///dl/fl_probe-1.0-py3-none-any.whl by pip"),
    ({"url": "file:///dl/fl_probe-1.0.tar.gz", "archive_info": {}}, "sdist file:///dl/fl_probe-1.0.tar.gz by pip"),
    ({"url": "https://github.com/o/r", "vcs_info": {"vcs": "git", "commit_id": "0123456789abcdef0123"}},
     "from git https://github.com/o/r@0123456789ab by pip"),
    (None, "from a package index by pip"),
])
def test_installed_as_reads_pep_610_direct_url(tmp_path: Path, monkeypatch, direct_url, expected) -> None:
    _dist(tmp_path, "fl-probe", direct_url)
    monkeypatch.syspath_prepend(str(tmp_path))
    assert bugreport.installed_as("fl-probe") == expected


def test_installed_as_says_when_torch_fl_is_not_installed() -> None:
    assert bugreport.installed_as("no-such-distribution-xyz") == \
        "not installed: imported from a source tree on sys.path"


def test_the_report_says_how_torch_fl_was_installed(capsys) -> None:
    out = _report(capsys)
    line = next(line for line in out.splitlines() if line.startswith("- **torch-fl**:"))
    assert line.startswith(f"- **torch-fl**: {torch_fl.__version__} (") and bugreport.installed_as().split()[0] in line


@pytest.mark.slow  # a child process / 9,212 redactions: seconds of CPU
def test_emulation_is_named_as_such() -> None:
    # a child process: an emulated chip stays registered in the process that loaded it
    env = {**os.environ, "FL_DEVICE": "emu:npu"}
    command = [sys.executable, "-c", "import sys, _torch_fl_cli; sys.exit(_torch_fl_cli.main())", "bugreport"]
    out = subprocess.run(command, env=env, capture_output=True, text=True, timeout=300, check=True).stdout
    plugin = next(line for line in out.splitlines() if line.startswith("- **plugin**:"))
    device = next(line for line in out.splitlines() if line.startswith("- **device**:"))
    assert "EMULATED by torch-fl (no real torch_npu is loaded" in plugin, plugin
    assert "version unknown" not in plugin
    assert "EMULATED on the CPU by torch-fl" in device, device


def test_a_real_backend_is_not_called_emulated(capsys) -> None:
    out = _report(capsys)
    assert "EMULATED" not in out


def test_a_long_log_is_read_in_bounded_memory_and_numbered_as_the_file(capsys, monkeypatch, tmp_path) -> None:
    monkeypatch.setattr(bugreport, "_SCAN_LINES", 100)  # only the last 100 lines are kept while reading
    log = tmp_path / "big.log"
    log.write_text("\n".join([*(f"INFO {i}" for i in range(1000)), *TRACEBACK, "INFO end"]) + "\n",
                   encoding="utf-8")
    out = _report(capsys, "--log", str(log))
    # the traceback starts on line 1001 of 1007: the 30 lines end with the file, the rest are before it
    assert "lines 978-1007 of 1007, around the last traceback; 977 lines before cut." in out, out
    assert "**Actual:** `RuntimeError: CUDA error: device-side assert triggered`" in out
