"""The suite cannot hang CI: a per-test timeout (pytest-timeout, a dev dependency) and a session bound in
`make test` (issue 22: a gloo destructor once held the whole suite for 30 minutes)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

import fast_budget
from torch_fl import _toml

ROOT = Path(__file__).resolve().parents[1]
# CPU work of a given length (the budget counts CPU time, not waiting)
BURN = ("def burn(seconds):\n    began = time.process_time()\n"
        "    while time.process_time() - began < seconds:\n        pass\n\n")


def test_pyproject_sets_a_per_test_timeout_and_the_dev_extra_installs_it():
    data = _toml.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    options = data["tool"]["pytest"]["ini_options"]
    assert 0 < int(options["timeout"]) <= 900
    assert any(dep.startswith("pytest-timeout") for dep in data["project"]["optional-dependencies"]["dev"])
    assert "--session-timeout=" in (ROOT / "Makefile").read_text(encoding="utf-8")


@pytest.mark.slow
def test_a_hanging_test_is_ended(tmp_path):
    (tmp_path / "test_hang.py").write_text("import time\n\ndef test_hangs():\n    time.sleep(60)\n")
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-o", "timeout=2",
                           str(tmp_path / "test_hang.py")], cwd=tmp_path, capture_output=True, text=True,
                          timeout=50)
    assert done.returncode != 0 and "Timeout" in done.stdout + done.stderr


def test_fast_suite_fails_on_a_test_over_its_budget_not_marked_slow(tmp_path):
    """`make test-fast` sets TORCH_FL_TEST_FAST_LIMIT=4: a not-slow test that takes more CPU time fails the
    session with its name and the fix; a slow-marked one is exempt; waiting (a loaded machine's wall time) is
    not work; torch runs one thread; without the variable nothing is timed."""
    (tmp_path / "test_timed.py").write_text(
        "import os\nimport time\nimport pytest\n\n" + BURN +
        "def test_quick():\n    open('threads.txt', 'w').write(os.environ.get('OMP_NUM_THREADS', 'unset'))\n\n"
        "def test_sluggish():\n    burn(0.6)\n\n"
        "def test_waits():\n    time.sleep(0.6)\n\n"
        "@pytest.mark.slow\ndef test_marked():\n    burn(0.6)\n")
    (tmp_path / "pytest.ini").write_text("[pytest]\nmarkers =\n    slow: slow\n")
    env = {**__import__("os").environ, "PYTHONPATH": str(ROOT / "tests")}

    def run(limit: str | None) -> subprocess.CompletedProcess:
        full = dict(env)
        full.pop("TORCH_FL_TEST_FAST_LIMIT", None)
        full.pop("OMP_NUM_THREADS", None)
        if limit is not None:
            full["TORCH_FL_TEST_FAST_LIMIT"] = limit
        return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "fast_budget",
                               str(tmp_path / "test_timed.py")], cwd=tmp_path, capture_output=True, text=True,
                              env=full, timeout=120)

    timed = run("0.3")
    assert timed.returncode == 1, timed.stdout + timed.stderr
    assert "4 passed" in timed.stdout and "test_timed.py::test_sluggish" in timed.stdout
    over = timed.stdout.split("not marked slow")[1]
    assert "test_marked" not in over and "test_waits" not in over
    assert "Fix: mark each @pytest.mark.slow" in timed.stdout
    assert (tmp_path / "threads.txt").read_text() == "1"  # one torch thread per process while budgeted
    assert run(None).returncode == 0
    bad = run("soon")
    assert bad.returncode != 0 and "is not a number of seconds" in bad.stdout + bad.stderr
    assert "TORCH_FL_TEST_FAST_LIMIT=4" in (ROOT / "Makefile").read_text(encoding="utf-8")


@pytest.mark.slow  # three pytest processes, two of them with xdist workers
def test_measured_slow_tests_and_slow_modules_leave_the_fast_set_and_xdist_keeps_the_budget(tmp_path):
    (tmp_path / "test_timed.py").write_text(
        "import time\n\n" + BURN + "def test_quick():\n    pass\n\ndef test_measured():\n    burn(0.6)\n")
    (tmp_path / "test_all_slow.py").write_text(
        "import pytest\npytestmark = pytest.mark.slow\nraise SystemExit('imported')\n")
    (tmp_path / "pytest.ini").write_text("[pytest]\nmarkers =\n    slow: slow\n")
    listed = tmp_path / "slow.txt"
    listed.write_text("# measured\ntest_timed.py::test_measured\n")
    env = {k: v for k, v in __import__("os").environ.items() if not k.startswith("TORCH_FL_TEST")}
    env |= {"PYTHONPATH": str(ROOT / "tests"), "TORCH_FL_TEST_FAST_LIMIT": "0.3"}

    def run(*extra: str, **more: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "fast_budget",
                               "-m", "not slow", *extra], cwd=tmp_path, capture_output=True, text=True,
                              env=env | more, timeout=300)

    fast = run(TORCH_FL_TEST_SLOW_LIST=str(listed))
    assert fast.returncode == 0, fast.stdout + fast.stderr  # the slow module was never imported
    assert "1 passed, 1 deselected" in fast.stdout
    unlisted = run("-n", "2", "test_timed.py")  # no list: the 0.6 s test is over the budget, seen under xdist
    assert unlisted.returncode == 1 and "test_timed.py::test_measured" in unlisted.stdout, unlisted.stdout
    assert run("-n", "2", TORCH_FL_TEST_SLOW_LIST=str(listed)).returncode == 0


def test_the_measured_slow_list_names_only_tests_that_exist():
    """tests/slow_measured.txt goes stale when a test is renamed or removed (issue 43): each line must name
    a file that exists and a test function defined in it (parameters left out)."""
    import re

    missing = []
    for line in (ROOT / "tests" / "slow_measured.txt").read_text(encoding="utf-8").splitlines():
        if not line.strip() or line.startswith("#"):
            continue
        path, _, name = line.partition("::")
        name = name.split("[", 1)[0].split("::")[-1]
        source = ROOT / path
        if not source.is_file() or not re.search(rf"^\s*(async )?def {re.escape(name)}\(", source.read_text(
                encoding="utf-8"), re.MULTILINE):
            missing.append(line)
    assert not missing, ("tests/slow_measured.txt names tests that no longer exist (rerun "
                         "scripts/measure_slow_tests.py on a quiet machine, or delete the lines): " + ", ".join(missing))


def _measuring_script():
    import importlib.util

    spec = importlib.util.spec_from_file_location("measure_slow_tests", ROOT / "scripts" / "measure_slow_tests.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_measured_slow_list_is_not_older_than_the_set_it_covers():
    """The list says how many not-slow test functions it measured; once the set has grown past that by more
    than the script's STALE_SHARE, tests that were never timed run in test-fast (issue 43: 1,128 measured of
    1,720). A planted header shows the check can fail."""
    script = _measuring_script()
    functions = len(fast_budget.fast_set_functions())
    reason = script.stale((ROOT / "tests" / "slow_measured.txt").read_text(encoding="utf-8"), functions)
    assert reason is None, f"tests/slow_measured.txt is stale: {reason}. Fix: python scripts/measure_slow_tests.py"
    assert script.stale("# covers 100 test functions (fast_budget.fast_set_functions)\n", 100 + 11) is not None
    assert script.stale("# covers 100 test functions (fast_budget.fast_set_functions)\n", 100 + 10) is None
    assert "does not say" in script.stale("# 54 of 1128 tests measured\n", 100)


def test_the_machine_factor_grows_with_the_time_work_takes(monkeypatch):
    """tests/machine_factor.py: 1 at least; a probe that takes five times its reference (a machine five times
    slower, or one core shared five ways) scales a bound five times."""
    import time

    import machine_factor

    assert machine_factor.machine_factor() >= 1.0
    monkeypatch.setattr(machine_factor, "_probe", lambda: time.sleep(5 * machine_factor.REFERENCE_SECONDS))
    monkeypatch.setattr(machine_factor.os, "getloadavg", lambda: (0.0, 0.0, 0.0))
    assert machine_factor.machine_factor() >= 5.0 and machine_factor.scaled(2.0) >= 10.0


@pytest.mark.slow  # two subprocesses
def test_the_slow_list_is_measured_in_cpu_time(tmp_path):
    """A measuring run (TORCH_FL_TEST_MEASURING) records each test's CPU time; the script lists the tests at or
    over the threshold: work is listed, waiting (what a loaded machine adds to wall time) is not."""
    (tmp_path / "test_timed.py").write_text(
        "import time\n\n" + BURN + "def test_quick():\n    pass\n\ndef test_works():\n    burn(0.6)\n\n"
        "def test_waits():\n    time.sleep(0.6)\n")
    (tmp_path / "pytest.ini").write_text("[pytest]\nmarkers =\n    slow: slow\n")
    measures, listed = tmp_path / "measures.json", tmp_path / "slow.txt"
    env = {k: v for k, v in __import__("os").environ.items() if not k.startswith("TORCH_FL_TEST")}
    env |= {"PYTHONPATH": str(ROOT / "tests"), fast_budget.MEASURING_VARIABLE: str(measures)}
    ran = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "fast_budget"],
                         cwd=tmp_path, capture_output=True, text=True, env=env, timeout=300)
    assert ran.returncode == 0, ran.stdout + ran.stderr
    written = subprocess.run([sys.executable, str(ROOT / "scripts" / "measure_slow_tests.py"), "--threshold", "0.3",
                              "--from", str(measures), "--out", str(listed)], capture_output=True, text=True,
                             timeout=300)
    assert written.returncode == 0, written.stdout + written.stderr
    assert [line for line in listed.read_text().splitlines() if not line.startswith("#")] == ["test_timed.py::test_works"]
    assert "# covers " in listed.read_text()
