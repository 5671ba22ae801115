"""What scan and fix do with files that are not plain, singly-linked, owned text files (issue 22, item 3):
owner, group and mode kept; hard links refused; every line ending kept; FIFOs, devices and symlink loops
skipped with a message, never opened. (The messages themselves are cases of scripts/error_cases.py.)"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

pytest.importorskip("libcst")

from torch_fl.migrate.fix import fix_paths
from torch_fl.migrate.scan import scan_paths

CUDA = "import torch\nx = torch.zeros(1).cuda()\n"


@pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() != 0, reason="changing a file's owner needs root")
def test_fix_as_root_keeps_owner_group_and_mode(tmp_path: Path) -> None:
    path = tmp_path / "train.py"
    path.write_text(CUDA)
    os.chown(path, 65534, 65534)  # nobody / nogroup
    os.chmod(path, 0o640)
    report = fix_paths([path])
    assert report.errors == [] and report.applied == 1
    st = path.stat()
    assert (st.st_uid, st.st_gid, st.st_mode & 0o7777) == (65534, 65534, 0o640)
    assert "torch.fl.device()" in path.read_text()


def test_hard_linked_file_is_refused_and_both_names_stay_equal(tmp_path: Path) -> None:
    path, other = tmp_path / "a.py", tmp_path / "b.py"
    path.write_text(CUDA)
    os.link(path, other)
    report = fix_paths([path])
    assert [e.error.split(",")[0] for e in report.errors] == ["hard-linked file (2 links)"]
    assert path.read_text() == other.read_text() == CUDA and os.path.samefile(path, other)


@pytest.mark.parametrize("ending", ["\n", "\r\n", "\r"], ids=["lf", "crlf", "cr"])
def test_every_line_ending_is_kept_to_the_last_one(tmp_path: Path, ending: str) -> None:
    path = tmp_path / "t.py"
    path.write_bytes(CUDA.replace("\n", ending).encode())
    fix_paths([path])
    data = path.read_bytes().decode()
    assert data.endswith(f"device()){ending}") and data.count(ending) == 3
    other = {"\n", "\r\n", "\r"} - {ending}
    assert all(e not in data.replace(ending, "") for e in other)


@pytest.mark.timeout(30)
def test_fifos_devices_and_symlink_loops_are_skipped_not_opened(tmp_path: Path) -> None:
    (tmp_path / "train.py").write_text(CUDA)
    os.mkfifo(tmp_path / "pipe.py")
    os.symlink("b.py", tmp_path / "a.py")
    os.symlink("a.py", tmp_path / "b.py")
    result = scan_paths([tmp_path, "/dev/null"])
    assert [Path(f.path).name for f in result.findings] == ["train.py"]
    reasons = {Path(p).name: r.split(",")[0] for p, r in result.skipped}
    assert reasons == {"a.py": "a symlink loop", "b.py": "a symlink loop", "pipe.py": "a FIFO",
                       "null": "a character device"}
    report = fix_paths([tmp_path])
    assert report.errors == [] and report.applied == 1
    assert {Path(p).name for p, _ in report.skipped} == {"a.py", "b.py", "pipe.py"}
