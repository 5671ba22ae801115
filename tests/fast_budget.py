"""A pytest plugin that keeps `make test-fast` fast, and honest on a loaded machine.

- Slow marking by measurement: tests/slow_measured.txt lists the tests of the not-slow set that took 1 s of
  CPU time or more (setup, call and teardown) in a serial run (scripts/measure_slow_tests.py writes it); each
  is marked slow here, as if it carried @pytest.mark.slow. A test decorated by hand stays marked whatever
  the file says.
- A budget that is checked: with TORCH_FL_TEST_FAST_LIMIT=SECONDS set (the Makefile's test-fast sets 4),
  a test that is not marked slow and whose call took more CPU time fails the session, naming the test, its
  time and the fix. CPU time (the test process's, plus the subprocesses it waited for), not wall time: two
  xdist workers on a loaded 2-core machine stretched wall time until a green suite exited 1 (issue 43).
  With the budget on, every process runs torch on one thread (OpenMP's idle threads spin, and that spinning
  is CPU time too), so a test's CPU time is its work. `make test` (CI) does not set the variable. Reports
  are read where they are logged (under pytest-xdist: in the controller, which gets the worker's measure
  through the report's user_properties).
- Measuring: with TORCH_FL_TEST_MEASURING=PATH no list is applied, and each test's CPU and wall seconds
  (setup + call + teardown) are written to PATH as JSON at the end (the script reads them).
- Under `-m "not slow"`, a module marked slow as a whole (`pytestmark = pytest.mark.slow`) is not even
  imported.
"""

from __future__ import annotations

import ast
import json
import os
import re
import resource
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

LIMIT_VARIABLE = "TORCH_FL_TEST_FAST_LIMIT"
MEASURING_VARIABLE = "TORCH_FL_TEST_MEASURING"  # set by scripts/measure_slow_tests.py: the JSON to write
LIST_VARIABLE = "TORCH_FL_TEST_SLOW_LIST"  # another list file (the plugin's own tests)
TESTS = Path(__file__).resolve().parent
_over: list[tuple[str, float]] = []
_measured: dict[str, dict[str, float]] = {}
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


def list_path() -> Path:
    return Path(os.environ.get(LIST_VARIABLE) or TESTS / "slow_measured.txt")


def measured_slow() -> set[str]:
    """Node ids of the list (one per line; '#' starts a comment line)."""
    path = list_path()
    if not path.is_file():
        return set()
    lines = path.read_text(encoding="utf-8").splitlines()
    return {line.strip() for line in lines if line.strip() and not line.startswith("#")}


def one_torch_thread() -> None:
    """One intra-op thread for torch in this process and the processes it starts: a test's CPU time is then
    its work, not OpenMP's spinning, and two xdist workers do not oversubscribe two cores."""
    os.environ["OMP_NUM_THREADS"] = "1"
    if "torch" in sys.modules:  # (imported by conftest before this runs: the variable is read already)
        sys.modules["torch"].set_num_threads(1)


def pytest_configure(config: pytest.Config) -> None:
    global _config
    config._fast_limit = _limit()  # type: ignore[attr-defined]  # (read once: a bad value stops at start)
    if config._fast_limit is not None or os.environ.get(MEASURING_VARIABLE):  # type: ignore[attr-defined]
        one_torch_thread()
    _config = config


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if os.environ.get(MEASURING_VARIABLE):
        return
    slow = measured_slow()
    for item in items:
        if item.nodeid in slow and not item.get_closest_marker("slow"):
            item.add_marker(pytest.mark.slow)


def _declares_slow(text: str) -> bool:
    """Whether a test module marks all of itself slow (`pytestmark = pytest.mark.slow` or a list
    starting with it), read from its text: no import needed to know."""
    return re.search(r"^pytestmark = \[?pytest\.mark\.slow\b", text, re.M) is not None


def pytest_ignore_collect(collection_path: Path, config: pytest.Config) -> bool | None:
    """Under `-m "not slow"` a module that is slow as a whole is not imported at all: every test in it
    would be deselected, and importing it (Lightning, transformers) was seconds of collecting."""
    if config.getoption("markexpr", "") == "not slow" and collection_path.suffix == ".py" \
            and collection_path.name.startswith("test_"):
        try:
            text = collection_path.read_text(encoding="utf-8")
        except OSError:
            return None
        return True if _declares_slow(text) else None
    return None


def _marked_slow(node: ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef) -> bool:
    return any("mark.slow" in ast.unparse(decorator) for decorator in node.decorator_list)


def fast_set_functions(root: Path = TESTS) -> set[str]:
    """The test functions of the not-slow set, 'tests/path.py::name' (a method: 'tests/path.py::Class::name'),
    read from the sources without importing them: those in a module or class not marked slow, not decorated
    slow themselves. Parameters are left out, so the count moves only when tests are added or removed; the
    slow list records it when measured, and its staleness test compares (tests/test_env_suite_bounds.py)."""
    found: set[str] = set()
    for path in sorted(root.rglob("test_*.py")):
        text = path.read_text(encoding="utf-8")
        if _declares_slow(text):
            continue
        prefix = path.relative_to(root.parent).as_posix()
        for node in ast.parse(text).body:
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name.startswith("test") \
                    and not _marked_slow(node):
                found.add(f"{prefix}::{node.name}")
            elif isinstance(node, ast.ClassDef) and node.name.startswith("Test") and not _marked_slow(node):
                found.update(f"{prefix}::{node.name}::{item.name}" for item in node.body
                             if isinstance(item, ast.FunctionDef | ast.AsyncFunctionDef)
                             and item.name.startswith("test") and not _marked_slow(item))
    return found


def _cpu_seconds() -> float:
    """CPU time of this process (all its threads) and of the children it has waited for."""
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return time.process_time() + children.ru_utime + children.ru_stime


def _timed(item: pytest.Item, when: str) -> Iterator[None]:
    if item.config._fast_limit is None and not os.environ.get(MEASURING_VARIABLE):  # type: ignore[attr-defined]
        yield
        return
    began = _cpu_seconds()
    yield
    item.user_properties.append((f"cpu_seconds_{when}", _cpu_seconds() - began))


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_setup(item: pytest.Item) -> Iterator[None]:
    yield from _timed(item, "setup")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Iterator[None]:
    yield from _timed(item, "call")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_teardown(item: pytest.Item) -> Iterator[None]:
    yield from _timed(item, "teardown")


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    config = _config
    if config is None or hasattr(config, "workerinput"):  # (an xdist worker: the controller counts)
        return
    seconds = dict(report.user_properties).get(f"cpu_seconds_{report.when}", report.duration)
    if os.environ.get(MEASURING_VARIABLE):
        entry = _measured.setdefault(report.nodeid, {"cpu": 0.0, "wall": 0.0, "failed": False})
        entry["cpu"] += seconds
        entry["wall"] += report.duration
        entry["failed"] = entry["failed"] or report.failed
    limit = config._fast_limit  # type: ignore[attr-defined]
    if limit is None or report.when != "call" or not report.passed or "slow" in report.keywords:
        return
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
    out = os.environ.get(MEASURING_VARIABLE)
    if out:
        Path(out).write_text(json.dumps(_measured, indent=0, sort_keys=True), encoding="utf-8")
    if session.config._fast_limit is not None and _over and exitstatus == 0:  # type: ignore[attr-defined]
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
