#!/usr/bin/env python3
"""`torchfl scan` for pre-commit's `language: script` hook (.pre-commit-hooks.yaml): runs the scanner
from this checkout's src/ with the system Python, so the hook environment installs nothing (no torch,
no torch-fl). Python >= 3.10. Arguments are `torchfl scan`'s (pre-commit appends the staged files)."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

import _torch_fl_cli  # after the path above

if __name__ == "__main__":
    sys.exit(_torch_fl_cli.main(["scan", *sys.argv[1:]]))
