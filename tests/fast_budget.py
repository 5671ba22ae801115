"""A pytest plugin that keeps `make test-fast` fast: with TORCH_FL_TEST_FAST_LIMIT=SECONDS set (the
Makefile's test-fast sets 4), a test that is not marked slow and whose call took longer fails the
session, naming the test, its time and the fix (mark it `@pytest.mark.slow`, or make it faster). Slow
marking is by measurement, not by guess; `make test` (CI) does not set the variable, so a loaded CI
machine cannot fail a green suite over timing."""

from __future__ import annotations

import os

import pytest

LIMIT_VARIABLE = "TORCH_FL_TEST_FAST_LIMIT"
_over: list[tuple[str, float]] = []


def _limit() -> float | None:
    text = os.environ.get(LIMIT_VARIABLE, "").strip()
    if not text:
        return None
    try:
        return float(text)
    except ValueError:
        raise pytest.UsageError(f"{LIMIT_VARIABLE}={text!r} is not a number of seconds; set e.g. 4, or "
                                f"unset it to time nothing") from None


def pytest_configure(config: pytest.Config) -> None:
    config._fast_limit = _limit()  # type: ignore[attr-defined]  # (read once: a bad value stops at start)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo):
    outcome = yield
    limit = item.config._fast_limit  # type: ignore[attr-defined]
    report = outcome.get_result()
    if limit is None or call.when != "call" or not report.passed or item.get_closest_marker("slow"):
        return
    if report.duration > limit:
        _over.append((item.nodeid, report.duration))


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
    if session.config._fast_limit is not None and _over and exitstatus == 0:  # type: ignore[attr-defined]
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
