"""The framework integrations are optional: `import torch_fl` loads none of them, nor their frameworks."""

from __future__ import annotations

import subprocess
import sys

import pytest

pytestmark = pytest.mark.slow  # a fresh Python that imports torch: 4-6 s each on the shared machine


def test_import_torch_fl_loads_no_framework():
    code = ("import sys, torch_fl, torch_fl.integrations; "
            "print(sorted(m for m in sys.modules if m.split('.')[0] in "
            "('pytorch_lightning', 'lightning', 'accelerate', 'transformers') "
            "or m.startswith('torch_fl.integrations.')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120)
    assert out.stdout.strip() == "[]", out.stdout


def test_without_lightning_the_import_says_what_to_install():
    code = ("import sys; sys.modules['pytorch_lightning'] = sys.modules['lightning'] = None\n"
            "try:\n    import torch_fl.integrations.lightning\n"
            "except ImportError as e:\n    print('refused:', e)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120)
    assert "refused: torch_fl.integrations.lightning needs PyTorch Lightning" in out.stdout, out.stdout + out.stderr
    assert "pip install pytorch-lightning" in out.stdout
