"""A pytest plugin that keeps `make test-fast` fast.

- Slow marking by measurement: tests/slow_measured.txt lists the tests that took 1 s or more in a quiet
  serial run of the not-slow set (scripts/measure_slow_tests.py writes it); each is marked slow here, as
  if it carried @pytest.mark.slow. A test decorated by hand stays marked whatever the file says.
- A budget that is checked: with TORCH_FL_TEST_FAST_LIMIT=SECONDS set (the Makefile's test-fast sets 4),
  a test that is not marked slow and whose call took longer fails the session, naming the test, its time
  and the fix. `make test` (CI) does not set the variable, so a loaded CI machine cannot fail a green
  suite over timing. Reports are read where they are logged (under pytest-xdist: in the controller).
- Under `-m "not slow"`, a module marked slow as a whole (`pytestmark = pytest.mark.slow`) is not even
  imported.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

LIMIT_VARIABLE = "TORCH_FL_TEST_FAST_LIMIT"
MEASURING_VARIABLE = "TORCH_FL_TEST_MEASURING"  # set by scripts/measure_slow_tests.py: apply no list
LIST_VARIABLE = "TORCH_FL_TEST_SLOW_LIST"  # another list file (the plugin's own tests)
_over: list[tuple[str, float]] = []
_config: pytest.Config | None = None


def _limit() -> float | None:
    text = os.environ.get(LIMIT_VARIABLE, "").strip()
    if not text:
        return None
    try:
        return float(text)
    except ValueError:
        raise pytest.UsageError(f"{LIMIT_VARIABLE}={text!r} is not a number of seconds; set e.g. 4, or "
                                f"unset it to time nothing") from None


def measured_slow() -> set[str]:
    """Node ids of the list (one per line; '#' starts a comment line)."""
    path = Path(os.environ.get(LIST_VARIABLE) or Path(__file__).with_name("slow_measured.txt"))
    if not path.is_file():
        return set()
    lines = path.read_text(encoding="utf-8").splitlines()
    return {line.strip() for line in lines if line.strip() and not line.startswith("#")}


def pytest_configure(config: pytest.Config) -> None:
    global _config
    config._fast_limit = _limit()  # type: ignore[attr-defined]  # (read once: a bad value stops at start)
    _config = config


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if os.environ.get(MEASURING_VARIABLE):
        return
    slow = measured_slow()
    for item in items:
        if item.nodeid in slow and not item.get_closest_marker("slow"):
            item.add_marker(pytest.mark.slow)


def _declares_slow(path: Path) -> bool:
    """Whether a test module marks all of itself slow (`pytestmark = pytest.mark.slow` or a list
    starting with it), read from its text: no import needed to know."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError:
        return False
    return re.search(r"^pytestmark = \[?pytest\.mark\.slow\b", text, re.M) is not None


def pytest_ignore_collect(collection_path: Path, config: pytest.Config) -> bool | None:
    """Under `-m "not slow"` a module that is slow as a whole is not imported at all: every test in it
    would be deselected, and importing it (Lightning, transformers) was seconds of collecting."""
    if config.getoption("markexpr", "") == "not slow" and collection_path.suffix == ".py" \
            and collection_path.name.startswith("test_") and _declares_slow(collection_path):
        return True
    return None


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    config = _config
    if config is None or hasattr(config, "workerinput"):  # (an xdist worker: the controller counts)
        return
    limit = config._fast_limit  # type: ignore[attr-defined]
    if limit is None or report.when != "call" or not report.passed or "slow" in report.keywords:
        return
    if report.duration > limit:
        _over.append((report.nodeid, report.duration))


def pytest_terminal_summary(terminalreporter, exitstatus: int, config: pytest.Config) -> None:
    limit = config._fast_limit  # type: ignore[attr-defined]
    if limit is None or not _over:
        return
    terminalreporter.section(f"tests over {limit:g} s not marked slow ({LIMIT_VARIABLE})")
    for nodeid, seconds in sorted(_over, key=lambda item: -item[1]):
        terminalreporter.write_line(f"{seconds:6.1f} s  {nodeid}")
    terminalreporter.write_line("Fix: mark each @pytest.mark.slow (test-fast skips it, make test runs it), or "
                                "make it faster.")


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    if hasattr(session.config, "workerinput"):
        return
    if session.config._fast_limit is not None and _over and exitstatus == 0:  # type: ignore[attr-defined]
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
