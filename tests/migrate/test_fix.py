"""`torchfl fix`: snapshot pairs per fixable rule, formatting kept, import added once, idempotence,
scan/fix agreement, unsafe gating, --diff, atomic writes, syntax errors, and the end-to-end fixture."""

from __future__ import annotations

import os
import shutil
import stat
import sys
from pathlib import Path

import pytest

pytest.importorskip("libcst")

from torch_fl.cli import main
from torch_fl.migrate import fix as fixmod
from torch_fl.migrate.fix import TORCH_FL_IMPORT, fix_paths, fix_source
from torch_fl.migrate.rules import RULES
from torch_fl.migrate.scan import scan_source

HERE = Path(__file__).parent
SNAPSHOTS = HERE / "snapshots" / "fix"
FIXTURE = HERE / "fixtures" / "train_gpt_cuda.py"
UPDATE = os.environ.get("FL_UPDATE_SNAPSHOTS") == "1"

BEFORE = sorted(SNAPSHOTS.glob("*.before.py"))


def _unsafe_snapshot(path: Path) -> bool:
    # FL105.before.py / FL902.before.py are unsafe rules; FL201-unsafe.before.py the unsafe part of FL201.
    name = path.name.split(".")[0]
    rule = RULES.get(name.split("-")[0])
    return name.endswith("-unsafe") or (rule is not None and rule.fix == "unsafe")


def _fixable_left(source: str, *, unsafe: bool) -> list[tuple[str, int]]:
    allowed = ("safe", "unsafe") if unsafe else ("safe",)
    return [(f.code, f.line) for f in scan_source(source, "<snapshot>") if f.safety in allowed]


@pytest.mark.parametrize("before", BEFORE, ids=lambda p: p.name.split(".")[0])
def test_snapshot(before: Path) -> None:
    unsafe = _unsafe_snapshot(before)
    after = before.with_name(before.name.replace(".before.py", ".after.py"))
    result = fix_source(before.read_text(), unsafe=unsafe, path=before)
    if UPDATE:
        after.write_text(result.new_source)
    assert after.exists(), f"no snapshot {after.name}; run with FL_UPDATE_SNAPSHOTS=1"
    assert result.new_source == after.read_text()
    assert result.not_applied == []


@pytest.mark.parametrize("before", BEFORE, ids=lambda p: p.name.split(".")[0])
def test_snapshot_is_idempotent_and_scan_agrees(before: Path) -> None:
    unsafe = _unsafe_snapshot(before)
    once = fix_source(before.read_text(), unsafe=unsafe).new_source
    twice = fix_source(once, unsafe=unsafe)
    assert twice.new_source == once
    assert twice.applied == []
    # What the scanner calls fixable at this safety level, the fixer fixed.
    assert _fixable_left(once, unsafe=unsafe) == []


def test_every_fixable_rule_has_a_snapshot() -> None:
    fixable = [code for code, rule in RULES.items() if rule.fix in ("safe", "unsafe")]
    assert fixable
    for code in fixable:
        assert (SNAPSHOTS / f"{code}.before.py").exists(), code


def test_every_snapshot_changes_something() -> None:
    for before in BEFORE:
        after = before.with_name(before.name.replace(".before.py", ".after.py"))
        assert before.read_text() != after.read_text(), before.name


RULE_FIXTURES = sorted((HERE / "fixtures" / "rules").glob("*.py"))


@pytest.mark.parametrize("fixture", RULE_FIXTURES, ids=lambda p: p.stem)
def test_scanner_rule_fixtures_fix_completely(fixture: Path) -> None:
    # The scanner's own per-rule fixtures: every finding it calls fixable (at either safety level) is
    # fixed, the result parses, and a second run changes nothing.
    import ast

    result = fix_source(fixture.read_text(), unsafe=True, path=fixture)
    ast.parse(result.new_source)
    assert result.not_applied == []
    assert _fixable_left(result.new_source, unsafe=True) == []
    assert fix_source(result.new_source, unsafe=True).new_source == result.new_source


# -- formatting, imports ---------------------------------------------------------------------------


def test_comments_and_formatting_are_kept() -> None:
    source = (
        "import torch   # torch itself\n"
        "\n"
        "\n"
        "# a comment block\n"
        "x = torch.zeros( 3 ,  device = 'cuda' )   # odd spacing stays\n"
        "y = [1,2,\n"
        "     3]  # unrelated code is untouched\n"
        "z = (x\n"
        "     .cuda()  # a chain over lines\n"
        "     .float())\n"
    )
    out = fix_source(source).new_source
    assert out == (
        "import torch   # torch itself\n"
        f"{TORCH_FL_IMPORT}\n"
        "\n"
        "\n"
        "# a comment block\n"
        "x = torch.zeros( 3 ,  device = torch.fl.device() )   # odd spacing stays\n"
        "y = [1,2,\n"
        "     3]  # unrelated code is untouched\n"
        "z = (x\n"
        "     .to(torch.fl.device())  # a chain over lines\n"
        "     .float())\n"
    )


def test_import_added_once_after_the_last_top_import() -> None:
    source = "import os\nimport torch\n\nA = torch.zeros(1).cuda()\nB = torch.device('cuda')\n"
    out = fix_source(source).new_source
    assert out.count("import torch_fl") == 1
    assert out.startswith(f"import os\nimport torch\n{TORCH_FL_IMPORT}\n\n")


@pytest.mark.parametrize("existing", ["import torch_fl", "import torch_fl.device",
                                      "from torch_fl import device"])
def test_no_import_when_torch_fl_is_imported(existing: str) -> None:
    source = f"import torch\n{existing}\n\nx = torch.zeros(1).cuda()\n"
    out = fix_source(source).new_source
    assert out.count("torch_fl") == 1
    assert "x = torch.zeros(1).to(torch.fl.device())" in out


def test_no_torch_fl_import_when_the_fix_needs_none() -> None:
    # FL303's fix names torch.fl; a file with nothing to fix gets nothing at all.
    source = "import torch\n\nx = torch.zeros(1)\n"
    assert fix_source(source).new_source == source


def test_import_alias_is_used() -> None:
    out = fix_source("import torch as th\n\nth.cuda.synchronize()\n").new_source
    assert "th.fl.synchronize()" in out and "import torch\n" not in out


def test_crlf_newlines_are_kept(tmp_path: Path) -> None:
    path = tmp_path / "crlf.py"
    path.write_bytes(b"import torch\r\n\r\nx = torch.zeros(1).cuda()\r\n")
    fix_paths([path])
    data = path.read_bytes()
    assert b"x = torch.zeros(1).to(torch.fl.device())\r\n" in data
    assert b"\n" not in data.replace(b"\r\n", b"")


def test_encoding_bom_and_symlink_are_kept(tmp_path: Path) -> None:
    bom = tmp_path / "bom.py"
    bom.write_bytes(b"\xef\xbb\xbfimport torch\nx = torch.zeros(1).cuda()\n")
    latin = tmp_path / "latin.py"
    latin.write_bytes("# -*- coding: latin-1 -*-\nimport torch\ns = 'caf\xe9'\nx = torch.zeros(1).cuda()\n"
                      .encode("latin-1"))
    real = tmp_path / "real.py"
    real.write_text("import torch\nx = torch.zeros(1).cuda()\n")
    link = tmp_path / "link.py"
    link.symlink_to(real)
    report = fix_paths([bom, latin, link])
    assert report.errors == [] and report.applied == 3
    assert bom.read_bytes().startswith(b"\xef\xbb\xbfimport torch\n")
    assert "s = 'caf\xe9'" in latin.read_bytes().decode("latin-1")
    assert link.is_symlink() and ".to(torch.fl.device())" in real.read_text()


def test_imports_from_torch_cuda_are_removed_only_when_unused() -> None:
    source = ("from torch.cuda.amp import GradScaler, autocast\n\n"
              "scaler = GradScaler()\n"
              "with autocast():\n    pass\n"
              "with autocast():  # noqa: FL301\n    pass\n")
    out = fix_source(source).new_source
    assert out.startswith("from torch.cuda.amp import autocast\nimport contextlib\nimport torch\n" + TORCH_FL_IMPORT + "\n")
    # enabled=torch.fl.is_accelerator(): torch.cuda.amp.GradScaler() was off on a CPU-only host, and stays off.
    assert "scaler = torch.amp.GradScaler(torch.fl.device_type(), enabled=torch.fl.is_accelerator())" in out
    # The region stays scoped to the accelerator: nothing on a CPU-only host (not a CPU autocast region).
    assert ("with torch.autocast(torch.fl.device_type()) if torch.fl.is_accelerator() else contextlib.nullcontext():"
            in out)
    assert "with autocast():  # noqa: FL301" in out


def test_multiline_calls_keep_one_argument_per_line() -> None:
    source = ("import torch\n\n"
              "scaler = torch.cuda.amp.GradScaler(\n    init_scale=1024,\n    enabled=True,\n)\n"
              "x = y.cuda(\n    0,\n    non_blocking=True,\n)\n")
    out = fix_source(source).new_source
    assert ("scaler = torch.amp.GradScaler(\n    torch.fl.device_type(),\n    init_scale=1024,\n"
            "    enabled=torch.fl.is_accelerator(),\n)\n") in out
    assert 'x = y.to(\n    torch.fl.device("acc0"),\n    non_blocking=True,\n)\n' in out


# -- safety, select, noqa ----------------------------------------------------------------------------


def test_unsafe_fixes_are_gated() -> None:
    source = (SNAPSHOTS / "FL105.before.py").read_text()
    safe = fix_source(source)
    assert safe.new_source == source
    assert safe.applied == [] and {c for c, _ in safe.skipped_unsafe} == {"FL105"}
    unsafe = fix_source(source, unsafe=True)
    assert unsafe.new_source != source and unsafe.skipped_unsafe == []


def test_get_device_name_is_unsafe_and_the_rest_of_fl201_safe() -> None:
    source = "import torch\n\nn = torch.cuda.get_device_name(0)\ntorch.cuda.empty_cache()\n"
    safe = fix_source(source)
    assert safe.applied == [("FL201", 4)] and safe.skipped_unsafe == [("FL201", 3)]
    assert "torch.cuda.get_device_name(0)" in safe.new_source
    assert "torch.fl.empty_cache()" in safe.new_source
    unsafe = fix_source(source, unsafe=True)
    assert "torch.fl.get_device_properties(0).name" in unsafe.new_source


def test_select_and_ignore() -> None:
    source = "import torch\n\nx = torch.zeros(1).cuda()\ntorch.cuda.synchronize()\n"
    only_102 = fix_source(source, select=["FL102"]).new_source
    assert ".to(torch.fl.device())" in only_102 and "torch.cuda.synchronize()" in only_102
    no_2xx = fix_source(source, ignore=["FL2"]).new_source
    assert no_2xx == only_102
    assert fix_source(source, select=["FL9"]).new_source == source


def test_noqa_findings_are_not_fixed() -> None:
    source = (SNAPSHOTS / "noqa.before.py").read_text()
    out = fix_source(source).new_source
    assert "a = torch.zeros(1).cuda()  # noqa: FL102" in out
    assert "b = torch.zeros(1).cuda()  # noqa" in out
    assert "torch.cuda.synchronize()  # noqa: FL202" in out
    assert "c = torch.zeros(1).to(torch.fl.device())  # noqa: FL101" in out  # another code's noqa


def test_files_without_fixable_findings_are_not_parsed_by_libcst(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    import libcst

    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("libcst parsed a file with nothing to fix")

    monkeypatch.setattr(libcst, "parse_module", refuse)
    (tmp_path / "clean.py").write_text("import torch\n\nx = torch.zeros(1)\n")
    (tmp_path / "unfixable.py").write_text("import torch\n\ntorch.backends.cudnn.benchmark = True\n")
    (tmp_path / "unsafe_only.py").write_text("import torch\n\ndevice = 'cuda'\nx = torch.zeros(1).to(device)\n")
    report = fix_paths([tmp_path])
    assert report.errors == [] and report.changed_files == []


# -- files: --diff, atomic writes, syntax errors --------------------------------------------------------


def _project(tmp_path: Path) -> Path:
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "train.py").write_text("import torch\n\nmodel = torch.nn.Linear(2, 2).cuda()\n")
    (tmp_path / "pkg" / "clean.py").write_text("x = 1\n")
    (tmp_path / "pkg" / "unsafe.py").write_text("import torch\n\ndevice = 'cuda'\nx = torch.zeros(1).to(device)\n")
    return tmp_path / "pkg"


def _snapshot_tree(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def test_cli_diff_writes_nothing(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pkg = _project(tmp_path)
    before = _snapshot_tree(pkg)
    assert main(["fix", str(pkg), "--diff"]) == 1
    out = capsys.readouterr().out
    assert _snapshot_tree(pkg) == before
    assert "-model = torch.nn.Linear(2, 2).cuda()" in out
    assert "+model = torch.nn.Linear(2, 2).to(torch.fl.device())" in out
    assert f"+{TORCH_FL_IMPORT}" in out and "train.py" in out
    assert main(["fix", str(pkg / "clean.py"), "--diff"]) == 0


def test_cli_fix_writes_and_reports(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pkg = _project(tmp_path)
    assert main(["fix", str(pkg)]) == 0
    out = capsys.readouterr().out
    assert "Fixed 1 finding in 1 file (1 unsafe fix not applied; use --unsafe-fixes)" in out
    assert ".to(torch.fl.device())" in (pkg / "train.py").read_text()
    assert (pkg / "unsafe.py").read_text() == "import torch\n\ndevice = 'cuda'\nx = torch.zeros(1).to(device)\n"
    assert main(["fix", str(pkg), "--unsafe-fixes"]) == 0
    assert "Fixed 1 finding in 1 file" in capsys.readouterr().out
    assert "device = torch.fl.device_type()" in (pkg / "unsafe.py").read_text()
    # Nothing left: a second run fixes nothing and --diff agrees.
    assert main(["fix", str(pkg), "--unsafe-fixes"]) == 0
    assert "Fixed 0 findings in 0 files" in capsys.readouterr().out
    assert main(["fix", str(pkg), "--unsafe-fixes", "--diff"]) == 0


def test_cli_select(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "t.py"
    path.write_text("import torch\n\nx = torch.zeros(1).cuda()\ntorch.cuda.synchronize()\n")
    assert main(["fix", str(path), "--select", "FL202"]) == 0
    text = path.read_text()
    assert "torch.fl.synchronize()" in text and ".cuda()" in text


def test_cli_missing_path(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["fix", str(tmp_path / "nope.py")]) == 2
    assert "no such file" in capsys.readouterr().err


def test_cli_without_libcst(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                            monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(fixmod, "have_libcst", lambda: False)
    assert main(["fix", str(_project(tmp_path))]) == 2
    # The words are the CLI's (cli/exits.py names every command's missing dependency the same way).
    assert "needs libcst: pip install 'torch-fl[migrate]'" in capsys.readouterr().err


def test_fix_paths_without_libcst_is_a_clear_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from torch_fl.errors import TorchFLError

    monkeypatch.setitem(sys.modules, "libcst", None)
    pkg = _project(tmp_path)
    # an autocast call joined with a line continuation: libcst does it
    (pkg / "amp.py").write_text("import torch\n\nwith torch.cuda.amp.autocast(dtype=torch.float16, \\\n        "
                                "enabled=True):\n    pass\n")
    with pytest.raises(TorchFLError, match=r"pip install 'torch-fl\[migrate\]'"):
        fix_paths([pkg])


def test_fixes_edited_in_place_need_no_libcst(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # .cuda() has a fix whose text the scan knows (textfix.py): no libcst needed, none imported.
    monkeypatch.setitem(sys.modules, "libcst", None)
    report = fix_paths([_project(tmp_path) / "train.py"])
    assert report.errors == [] and report.applied == 1
    assert "model = torch.nn.Linear(2, 2).to(torch.fl.device())" in (tmp_path / "pkg" / "train.py").read_text()


def test_file_mode_is_kept(tmp_path: Path) -> None:
    path = _project(tmp_path) / "train.py"
    path.chmod(0o754)
    fix_paths([path])
    assert stat.S_IMODE(path.stat().st_mode) == 0o754
    assert ".to(torch.fl.device())" in path.read_text()


@pytest.mark.parametrize("fail", ["replace", "fsync", "write"])
def test_failed_write_leaves_the_original_and_no_temp_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                           fail: str) -> None:
    pkg = _project(tmp_path)
    before = _snapshot_tree(pkg)

    def boom(*args: object, **kwargs: object) -> None:
        raise OSError(28, "No space left on device")

    if fail == "replace":
        monkeypatch.setattr(fixmod.os, "replace", boom)
    elif fail == "fsync":
        monkeypatch.setattr(fixmod.os, "fsync", boom)
    else:
        # Half the bytes reach the temp file, then the disk fills.
        real_fdopen = os.fdopen

        class HalfWriter:
            def __init__(self, fd: int, mode: str) -> None:
                self.f = real_fdopen(fd, mode)

            def __enter__(self) -> HalfWriter:
                return self

            def __exit__(self, *exc: object) -> None:
                self.f.close()

            def write(self, data: bytes) -> None:
                self.f.write(data[: len(data) // 2])
                self.f.flush()
                raise OSError(28, "No space left on device")

        monkeypatch.setattr(fixmod.os, "fdopen", HalfWriter)
    report = fix_paths([pkg])
    assert _snapshot_tree(pkg) == before  # original intact, no temp file
    [failed] = report.errors
    assert failed.path.name == "train.py" and "cannot write" in (failed.error or "")
    assert report.applied == 0


def test_interrupted_write_leaves_no_temp_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pkg = _project(tmp_path)
    before = _snapshot_tree(pkg)

    def interrupt(*args: object, **kwargs: object) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(fixmod.os, "replace", interrupt)
    with pytest.raises(KeyboardInterrupt):
        fix_paths([pkg])
    assert _snapshot_tree(pkg) == before


def test_syntax_errors_are_reported_and_skipped(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pkg = _project(tmp_path)
    broken = pkg / "broken.py"
    broken.write_text("import torch\nx = torch.zeros(1).cuda(\n")
    report = fix_paths([pkg])
    [error] = report.errors
    assert error.path == broken and "syntax error" in (error.error or "")
    assert ".to(torch.fl.device())" in (pkg / "train.py").read_text()
    assert broken.read_text() == "import torch\nx = torch.zeros(1).cuda(\n"
    (pkg / "train.py").write_text("import torch\n\nmodel = torch.nn.Linear(2, 2).cuda()\n")
    assert main(["fix", str(pkg)]) == 1
    captured = capsys.readouterr()
    assert "broken.py: syntax error, skipped" in captured.err and "Fixed 1 finding in 1 file" in captured.out


# -- end to end ------------------------------------------------------------------------------------


def _fixture_run_args() -> list[str]:
    """The arguments that run the fixture for only a few iterations, from its docstring's
    "Single process:  python train_gpt_cuda.py --max_iters=3" line (as the alias tests run it)."""
    for line in FIXTURE.read_text().splitlines():
        if line.startswith("Single process:") and FIXTURE.name in line:
            return line.split(FIXTURE.name, 1)[1].split()
    return ["--max_iters=3"]


@pytest.mark.slow
def test_fixed_training_script_runs_on_cpu(tmp_path: Path, run_as_user) -> None:
    script = tmp_path / FIXTURE.name
    shutil.copy(FIXTURE, script)
    # Unsafe fixes are needed (`device = "cuda"` is FL105). FL902 included: the script's
    # `device_type == "cuda"` guards pin_memory(), and becomes torch.fl.is_accelerator(device_type), which
    # keeps it off on a CPU run (the old `== torch.fl.device_type()` rewrite was true there and crashed).
    report = fix_paths([script], unsafe=True)
    assert report.errors == [] and report.applied > 0
    fixed = script.read_text()
    assert fixed.count("import torch_fl") == 1 and ".cuda()" not in fixed
    assert "torch.cuda.amp" not in fixed and '"nccl"' not in fixed
    assert fix_paths([script], unsafe=True).changed_files == []
    stdout = run_as_user(script, *_fixture_run_args(), fl_device="cpu")
    assert "device cpu" in stdout
    assert "iter 2: loss" in stdout


def test_symlinks_out_of_the_tree_are_skipped(tmp_path: Path) -> None:
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    target = outside / "shared.py"
    target.write_text("import torch\nx = torch.zeros(1).cuda()\n")
    (tmp_path / "proj").mkdir()
    tree = _project(tmp_path / "proj")
    (tree / "shared.py").symlink_to(target)
    (tree / "linked_dir").symlink_to(outside, target_is_directory=True)  # not walked (as scan)
    report = fix_paths([tree])
    assert target.read_text() == "import torch\nx = torch.zeros(1).cuda()\n"
    skipped = [f for f in report.errors if f.path.name == "shared.py"]
    assert skipped and "outside" in skipped[0].error
    assert ".to(torch.fl.device())" in (tree / "train.py").read_text()  # the rest is fixed


def test_read_only_files_are_refused_and_intact(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = _project(tmp_path) / "train.py"
    before = path.read_bytes()
    path.chmod(0o444)
    try:
        status = main(["fix", str(path)])
        assert status == 1
        assert path.read_bytes() == before
        assert "read-only" in capsys.readouterr().err
    finally:
        path.chmod(0o644)


def test_the_rewriter_has_every_member_a_fix_may_use():
    # Fixes are typed against rules.base.FixContext; fix_rewriter's Rewriter is what they get.
    pytest.importorskip("libcst")
    from torch_fl.migrate.fix_rewriter import Spelling, rewriter_class
    from torch_fl.migrate.rules.base import FixContext

    rewriter = rewriter_class()([], Spelling.of({}, False, ""))
    members = {n for n in vars(FixContext) if not n.startswith("_")} | set(FixContext.__annotations__)
    assert {"fl_call", "commas", "no_space", "torch_name"} <= members
    assert not sorted(n for n in members if not hasattr(rewriter, n)), "the rewriter lacks a FixContext member"
