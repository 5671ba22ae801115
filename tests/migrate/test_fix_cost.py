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


# Calls laid out over lines, trailing commas, comments between arguments, arguments given positionally, a
# device spelled out to a runtime call, a decorated definition, `enabled=` in its many spellings: each is
# edited in place and must read exactly as libcst writes it.
LAYOUTS = """\
import torch
from torch.cuda.amp import GradScaler

with torch.cuda.amp.autocast(
        dtype=torch.float16):
    pass
with torch.cuda.amp.autocast(
    dtype=torch.float16,
    enabled=True,
):
    pass
with torch.cuda.amp.autocast(  # half precision
    dtype=torch.float16,  # the dtype
    cache_enabled=False):
    pass
with torch.cuda.amp.autocast(True, torch.bfloat16):
    pass
s1 = torch.cuda.amp.GradScaler(
    init_scale=2.0,
    growth_interval=3,
)
s2 = torch.cuda.amp.GradScaler(
    init_scale=2.0,
    growth_interval=3)
s3 = torch.cuda.amp.GradScaler(init_scale=2.0,
                               growth_interval=3)
s4 = torch.cuda.amp.GradScaler(init_scale=2.0, growth_interval=3,)
s5 = torch.cuda.amp.GradScaler(init_scale=2.0 , growth_interval=3 , )
s6 = torch.cuda.amp.GradScaler(
    init_scale=2.0
)
s7 = torch.cuda.amp.GradScaler(
)
s8 = torch.cuda.amp.GradScaler( )
s9 = GradScaler(2.0, 2.0, 0.5, 10, use_amp)
s10 = torch.amp.GradScaler("cuda", enabled=(a == 1))
s11 = torch.amp.GradScaler("cuda", enabled = None)
s12 = torch.amp.GradScaler("cuda", enabled=(False))
s13 = torch.amp.GradScaler("cuda", enabled=a or b)
s14 = torch.amp.GradScaler("cuda", enabled=(a or b))
s15 = torch.amp.GradScaler(
    device="cuda",
    enabled=flags[0],
)
with torch.autocast(
    "cuda",
    dtype=torch.float16,
):
    pass
x1 = y.cuda(
    non_blocking=True,
)
x2 = y.cuda(non_blocking=True,)
x3 = y.cuda(0, True)
x4 = y.cuda(
    non_blocking=True
)
x5 = y.cuda(  non_blocking=True  )
x6 = y.cuda(non_blocking=True , )
x7 = y.cuda(non_blocking=True, device=1)
x8 = y.cuda(
  0, non_blocking=True)
x9 = y.cuda(
)
x10 = torch.zeros(2, device="cuda").cuda()
torch.cuda.synchronize(
    'cuda',
)
torch.cuda.set_device(
  'cuda:1')
torch.cuda.set_device(device = "cuda:2")
torch.cuda.set_device(torch.device("cuda", rank))
torch.cuda.set_device(torch.device("cuda:3"))
torch.cuda.synchronize(torch.device("cuda"))
torch.cuda.set_device(local_rank)
torch.cuda.synchronize(device=0)
name = torch.cuda.get_device_name(
    0)
ok = x.type() == "torch.cuda.HalfTensor" or y
if (a + b).is_cuda and "cuda" in str(dev) and x.device.type != "cuda":
    picked = not dev.startswith("cuda") or [t.is_cuda for t in ts]


@torch.amp.custom_fwd(device_type="cuda")
def forward(ctx, x):
    return x
"""


def _same_as_libcst(monkeypatch: pytest.MonkeyPatch, source: str, unsafe: bool, name: str) -> tuple[fix.FixResult, bool]:
    """The in-place result (equal to libcst's), and whether it fell back to libcst."""
    monkeypatch.setattr(fix, "TEXT_EDITS", False)
    reference = fix.fix_source(source, unsafe=unsafe, path=name)
    monkeypatch.setattr(fix, "TEXT_EDITS", True)
    fell_back = []
    segments = fix.rewrite_segments
    monkeypatch.setattr(fix, "rewrite_segments", lambda *a, **k: fell_back.append(1) or segments(*a, **k))
    fast = fix.fix_source(source, unsafe=unsafe, path=name)
    monkeypatch.setattr(fix, "rewrite_segments", segments)
    assert fast == reference, name
    return fast, bool(fell_back)


def _variants(source: str) -> list[tuple[str, str]]:
    """The file as it is, with CRLF line endings, and without its final line break."""
    return [("", source), (" (CRLF)", source.replace("\n", "\r\n")), (" (no final newline)", source.rstrip("\n"))]


@pytest.mark.parametrize("unsafe", [False, True], ids=["safe", "unsafe"])
def test_edits_in_place_equal_the_libcst_rewrite_on_every_fixture(monkeypatch: pytest.MonkeyPatch, unsafe: bool) -> None:
    in_place, fallbacks = 0, []
    for path in FIXTURES:
        for kind, source in _variants(path.read_text(encoding="utf-8")):
            result, fell_back = _same_as_libcst(monkeypatch, source, unsafe, path.name + kind)
            if result.applied:
                in_place += not fell_back
                fallbacks += [path.name + kind] if fell_back else []
    assert in_place >= 80  # the in-place path is taken on most of the fixtures, in every variant
    if not unsafe:
        # Every safe fix in the fixtures (multi-line calls, decorators, CRLF files among them) is edited in
        # place: `torchfl fix` on this tree never imports libcst.
        assert fallbacks == []


@pytest.mark.parametrize("unsafe", [False, True], ids=["safe", "unsafe"])
def test_call_layouts_are_edited_in_place_as_libcst_writes_them(monkeypatch: pytest.MonkeyPatch, unsafe: bool) -> None:
    for kind, source in _variants(LAYOUTS):
        result, fell_back = _same_as_libcst(monkeypatch, source, unsafe, "layouts.py" + kind)
        assert len(result.applied) >= 40 and not result.not_applied and not fell_back, kind
    fixed = fix.fix_source(LAYOUTS).new_source
    assert "s5 = torch.amp.GradScaler(torch.fl.device_type(), init_scale=2.0 , growth_interval=3 , " \
           "enabled=torch.fl.is_accelerator())" in fixed
    assert "with torch.autocast(\n        torch.fl.device_type(),\n        dtype=torch.float16) if" in fixed
    assert "torch.fl.set_device(\n  1)" in fixed and "torch.fl.set_device(rank)" in fixed
    assert "enabled = torch.fl.is_accelerator() and None)" in fixed and "enabled=(False))" in fixed
    assert "enabled=torch.fl.is_accelerator() and (a or b))" in fixed
    assert "@torch.amp.custom_fwd(device_type=torch.fl.device_type())" in fixed
    checks = fix.fix_source(LAYOUTS, unsafe=True).new_source  # FL902, unsafe fixes
    assert "if torch.fl.is_accelerator((a + b).device) and torch.fl.is_accelerator(str(dev)) and not " \
           "torch.fl.is_accelerator(x.device.type):" in checks
    assert "picked = not torch.fl.is_accelerator(dev) or [torch.fl.is_accelerator(t.device) for t in ts]" in checks


@pytest.mark.parametrize("source", [
    'import os\nos.environ["X"] = "1"\nimport torch  # noqa: E402\nx = torch.zeros(1).cuda()\n',
    'import os\nos.environ["X"] = "1"\nimport torch\nimport numpy\nfrom torch.cuda.amp import autocast\n'
    'with autocast():\n    pass\n',
    '"""Doc."""\nimport os\nx = 1\nimport torch as th  # noqa: E402,F401\nimport torch\ny = th.zeros(1).cuda()\n',
], ids=["silenced", "plain", "alias"])
def test_imports_after_a_late_torch_import_are_edited_in_place(monkeypatch: pytest.MonkeyPatch, source: str) -> None:
    # A script that sets the environment before importing torch: torch_fl goes right after that import
    # (importing it imports torch), silenced for E402 where the user silenced it.
    result, fell_back = _same_as_libcst(monkeypatch, source, False, "late.py")
    assert result.applied and not fell_back
    noqa = "E402" in source
    assert ("import torch_fl  # noqa: E402, F401" in result.new_source) is noqa


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
    assert _fix_in_subprocess(tmp_path, bare=True) == (False, False)  # a call over lines: in place too
    (tmp_path / "joined.py").write_text("import torch\nwith torch.cuda.amp.autocast(dtype=torch.float16, \\\n"
                                        "        enabled=True):\n    pass\n")
    assert _fix_in_subprocess(tmp_path, bare=True) == (False, True)  # a line continuation: libcst


def test_the_console_script_fix_imports_no_torch(tmp_path: Path) -> None:
    (tmp_path / "train.py").write_text("import torch\nmodel = torch.nn.Linear(2, 2).cuda()\n")
    assert _fix_in_subprocess(tmp_path, bare=False)[0] is False
