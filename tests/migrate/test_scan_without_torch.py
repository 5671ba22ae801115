"""`torchfl scan` runs without torch (pre-commit hook environments, CI lint jobs): the console script's
module (_torch_fl_cli) loads the scanner without torch_fl/__init__.py, which imports torch."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

# torch made unimportable (None in sys.modules: `import torch` raises ImportError), as in a hook env.
_NO_TORCH = ("import sys; sys.modules['torch'] = None; sys.path.insert(0, {src!r})\n"
             "import _torch_fl_cli\n"
             "status = _torch_fl_cli.main(['scan', {path!r}])\n"
             "assert sys.modules['torch'] is None, 'torch was imported'\n"
             "print('torch-free', status)\n")


def test_scan_runs_where_torch_cannot_be_imported(tmp_path: Path) -> None:
    script = tmp_path / "train.py"
    script.write_text("import torch\nx = torch.zeros(3).cuda()\ndevice = 'cuda' if torch.cuda.is_available() else 'cpu'\n")
    code = _NO_TORCH.format(src=str(ROOT / "src"), path=str(script))
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert "FL102" in proc.stdout and "FL901" in proc.stdout and "torch-free 1" in proc.stdout


def test_pre_commit_hook_script_runs_without_torch(tmp_path: Path) -> None:
    clean = tmp_path / "ok.py"
    clean.write_text("import torch\nx = torch.zeros(3, device=torch.fl.device())\n")
    code = ("import runpy, sys; sys.modules['torch'] = None\n"
            f"sys.argv = ['hook', {str(clean)!r}]\n"
            f"runpy.run_path({str(ROOT / 'scripts' / 'torchfl_scan_hook.py')!r}, run_name='__main__')\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "All checks passed" in proc.stdout
    hooks = (ROOT / ".pre-commit-hooks.yaml").read_text()
    assert "entry: scripts/torchfl_scan_hook.py" in hooks and "language: script" in hooks


def test_other_commands_still_get_the_real_package() -> None:
    code = (f"import sys; sys.path.insert(0, {str(ROOT / 'src')!r})\n"
            "import _torch_fl_cli\n"
            "_torch_fl_cli.main(['describe', '--list'])\n"
            "import torch_fl, torch; assert torch.fl is torch_fl and hasattr(torch_fl, 'device')\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
