"""End to end: the scanner finds every CUDA coupling of a realistic nanoGPT-style training script."""

from __future__ import annotations

from pathlib import Path

import pytest

from torch_fl.migrate.scan import scan_paths

SCRIPT = Path(__file__).parent / "fixtures" / "train_gpt_cuda.py"

# (a piece of the coupled line, the rule that must report it)
COUPLINGS = [
    ('backend = "nccl"', "FL501"),                       # DDP over nccl
    ('device = "cuda"', "FL105"),                        # the config's device string
    ("torch.cuda.is_available()", "FL201"),              # becomes torch.fl.is_accelerator()
    ("torch.cuda.set_device(", "FL201"),
    ("torch.cuda.manual_seed(", "FL201"),
    ("torch.backends.cuda.matmul.allow_tf32", "FL402"),
    ("torch.backends.cudnn.allow_tf32", "FL401"),
    ('if device_type == "cuda"', "FL902"),               # gates pin_memory / non_blocking copies
    ("torch.cuda.amp.GradScaler(", "FL302"),
    (".cuda()", "FL102"),
    ("torch.cuda.synchronize()", "FL202"),               # timing ...
    ("torch.cuda.synchronize()", "FL203"),               # ... inside the training loop
    ("torch.cuda.max_memory_allocated()", "FL201"),
    ("torch.cuda.Event(", "FL201"),
]


@pytest.fixture(scope="module")
def findings():
    result = scan_paths([SCRIPT], select=["ALL"])  # FL203 (a performance hint) is opt-in
    assert not result.errors
    return {(f.line, f.code) for f in result.findings}


@pytest.mark.parametrize(("needle", "code"), COUPLINGS)
def test_every_coupling_is_found(findings, needle, code):
    lines = [n for n, text in enumerate(SCRIPT.read_text().splitlines(), 1) if needle in text]
    assert lines, f"the fixture no longer contains {needle!r}"
    assert any((line, code) in findings for line in lines), f"{code} not reported for {needle!r}"
