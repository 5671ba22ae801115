"""docs/errors.md stays true: every bad input listed there gives the message shown, with no traceback."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("error_cases", ROOT / "scripts" / "error_cases.py")
cases = importlib.util.module_from_spec(_spec)
sys.modules["error_cases"] = cases  # dataclasses look their module up while the class is built
_spec.loader.exec_module(cases)


@pytest.mark.parametrize("case", cases.CASES, ids=[c.what[:60] for c in cases.CASES])
def test_each_bad_input_gives_its_message(case):
    rc, message = cases.run(case)
    assert rc == case.rc, message
    assert case.expect in message
    assert "Traceback" not in message and "internal error" not in message


@pytest.mark.slow
def test_errors_doc_is_generated_from_the_cases():
    assert (ROOT / "docs" / "errors.md").read_text(encoding="utf-8") == cases.render(), \
        "regenerate: python scripts/error_cases.py --write"
