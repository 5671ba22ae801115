"""What `torchfl fix` costs (issue 37 item 3): no torch, libcst only where a file needs it, and the fixes
edited in place (textfix.py) giving exactly the text the libcst rewrite gives. The speed itself is
benchmarks/fix_speed.py's (ratios printed side by side, never timed here)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("libcst")

from torch_fl.migrate import fix

HERE = Path(__file__).parent
ROOT = HERE.parents[1]
FIXTURES = sorted(set((HERE / "fixtures").rglob("*.py")))
# The console script's start (src/_torch_fl_cli.py), then `fix`, then what was imported.
# bare: as the console script gives `scan` (and would give `fix`), the torch_fl package without its __init__.
RUNNER = """\
import sys
sys.path.insert(0, {src!r})
import _torch_fl_cli
if {bare}:
    _torch_fl_cli._bare_package()
    from torch_fl.cli import main
else:
    main = _torch_fl_cli.main
try:
    main(sys.argv[1:])
except SystemExit:
    pass
print("torch" in sys.modules, "libcst" in sys.modules)
"""


@pytest.mark.parametrize("unsafe", [False, True], ids=["safe", "unsafe"])
def test_edits_in_place_equal_the_libcst_rewrite_on_every_fixture(monkeypatch: pytest.MonkeyPatch, unsafe: bool) -> None:
    used = 0
    original = fix.textfix.rewrite

    def counted(*args, **kwargs):  # type: ignore[no-untyped-def]
        nonlocal used
        out = original(*args, **kwargs)
        used += 1
        return out

    monkeypatch.setattr(fix.textfix, "rewrite", counted)
    for path in FIXTURES:
        source = path.read_text(encoding="utf-8")
        monkeypatch.setattr(fix, "TEXT_EDITS", False)
        reference = fix.fix_source(source, unsafe=unsafe, path=path.name)
        monkeypatch.setattr(fix, "TEXT_EDITS", True)
        fast = fix.fix_source(source, unsafe=unsafe, path=path.name)
        assert fast == reference, path.name
    assert used >= 10  # the in-place path is taken on a good part of the fixtures


def test_precedence_and_imports_as_libcst_writes_them() -> None:
    source = ('"""Doc."""\nimport os\nimport torch as th  # the alias\n\n# a comment\n'
              "x = th.ones(1).cuda(1)\ny = th.device('cuda:0')\nth.cuda.synchronize()\n"
              "ok = th.cuda.is_available\n")
    fix.TEXT_EDITS = False
    try:
        reference = fix.fix_source(source).new_source
    finally:
        fix.TEXT_EDITS = True
    assert fix.fix_source(source).new_source == reference
    assert "import torch as th  # the alias\nimport torch_fl  # noqa: F401  (installs torch.fl)\n\n# a comment" \
        in reference
    assert 'x = th.ones(1).to(th.fl.device("acc1"))' in reference and "y = th.fl.device('acc0')" in reference


def _fix_in_subprocess(tree: Path, bare: bool) -> tuple[bool, bool]:
    code = RUNNER.format(src=str(ROOT / "src"), bare=bare)
    done = subprocess.run([sys.executable, "-c", code, "fix", "--diff", str(tree)], capture_output=True, text=True,
                          timeout=300)
    torch_loaded, libcst_loaded = done.stdout.strip().splitlines()[-1].split()
    return torch_loaded == "True", libcst_loaded == "True"


def test_fix_imports_no_torch_and_libcst_only_when_a_file_needs_it(tmp_path: Path) -> None:
    (tmp_path / "train.py").write_text("import torch\nmodel = torch.nn.Linear(2, 2).cuda()\n")
    assert _fix_in_subprocess(tmp_path, bare=True) == (False, False)  # .cuda(): edited in place
    (tmp_path / "amp.py").write_text("import torch\nwith torch.cuda.amp.autocast(\n        dtype=torch.float16):\n    pass\n")
    assert _fix_in_subprocess(tmp_path, bare=True) == (False, True)  # a call over lines: libcst


def test_the_console_script_fix_imports_no_torch(tmp_path: Path) -> None:
    (tmp_path / "train.py").write_text("import torch\nmodel = torch.nn.Linear(2, 2).cuda()\n")
    assert _fix_in_subprocess(tmp_path, bare=False)[0] is False
