"""A pytest plugin that keeps `make test-fast` fast.

- Slow marking by measurement: tests/slow_measured.txt lists the tests that took 1 s or more in a quiet
  serial run of the not-slow set (scripts/measure_slow_tests.py writes it); each is marked slow here, as
  if it carried @pytest.mark.slow. A test decorated by hand stays marked whatever the file says.
- A budget that is checked: with TORCH_FL_TEST_FAST_LIMIT=SECONDS set (the Makefile's test-fast sets 4),
  a test that is not marked slow and whose call took more CPU time fails the session, naming the test, its
  time and the fix. CPU time (the test process's, plus the subprocesses it waited for), not wall time: two
  xdist workers on a loaded 2-core machine stretched wall time until a green suite exited 1 (issue 43); the
  Makefile runs test-fast with one torch thread per worker, so a test's CPU time is its work. `make test`
  (CI) does not set the variable. Reports are read where they are logged (under pytest-xdist: in the
  controller, which gets the worker's measure through the report's user_properties).
- Under `-m "not slow"`, a module marked slow as a whole (`pytestmark = pytest.mark.slow`) is not even
  imported.
"""

from __future__ import annotations

import os
import re
import resource
import time
from collections.abc import Iterator
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


CPU_PROPERTY = "cpu_seconds"


def _cpu_seconds() -> float:
    """CPU time of this process (all its threads) and of the children it has waited for."""
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return time.process_time() + children.ru_utime + children.ru_stime


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Iterator[None]:
    if item.config._fast_limit is None:  # type: ignore[attr-defined]
        yield
        return
    began = _cpu_seconds()
    yield
    item.user_properties.append((CPU_PROPERTY, _cpu_seconds() - began))


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    config = _config
    if config is None or hasattr(config, "workerinput"):  # (an xdist worker: the controller counts)
        return
    limit = config._fast_limit  # type: ignore[attr-defined]
    if limit is None or report.when != "call" or not report.passed or "slow" in report.keywords:
        return
    seconds = dict(report.user_properties).get(CPU_PROPERTY, report.duration)
    if seconds > limit:
        _over.append((report.nodeid, seconds))


def pytest_terminal_summary(terminalreporter, exitstatus: int, config: pytest.Config) -> None:
    limit = config._fast_limit  # type: ignore[attr-defined]
    if limit is None or not _over:
        return
    terminalreporter.section(f"tests over {limit:g} s of CPU time not marked slow ({LIMIT_VARIABLE})")
    for nodeid, seconds in sorted(_over, key=lambda item: -item[1]):
        terminalreporter.write_line(f"{seconds:6.1f} s CPU  {nodeid}")
    terminalreporter.write_line("Fix: mark each @pytest.mark.slow (test-fast skips it, make test runs it), or "
                                "make it faster.")


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    if hasattr(session.config, "workerinput"):
        return
    if session.config._fast_limit is not None and _over and exitstatus == 0:  # type: ignore[attr-defined]
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
