"""Write tests/slow_measured.txt: the tests of the not-slow set that take THRESHOLD seconds of CPU time or
more (setup, call and teardown together, torch on one thread), measured in one run. CPU time, as
test-fast's budget counts it (tests/fast_budget.py), so a loaded machine measures what a quiet one does,
and pytest-xdist workers (--workers) measure what one serial process does.
tests/fast_budget.py marks each listed test slow, so `make test-fast` skips it and `make test` runs it.
Tests decorated @pytest.mark.slow by hand are not measured again (they stay slow).

    python scripts/measure_slow_tests.py [--threshold 1.0] [--workers 2] [--from JSON]

--from JSON reads the measures of an earlier run (TORCH_FL_TEST_MEASURING=JSON pytest -m "not slow")
instead of running the suite. The list records how many test functions the not-slow set had
(tests/fast_budget.py, fast_set_functions); tests/test_env_suite_bounds.py fails when the set has grown
past that by more than STALE_SHARE, or when a listed test is gone: then run this again.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "tests" / "slow_measured.txt"
sys.path.insert(0, str(ROOT / "tests"))
import fast_budget  # noqa: E402  (the plugin that applies the list: one definition of the set and the timing)

COVERS = re.compile(r"^# covers (\d+) test functions\b", re.M)
STALE_SHARE = 0.10  # the set may grow by 10% of its functions before the list counts as stale


def covered(text: str) -> int | None:
    """The number of not-slow test functions a list file's header says it measured."""
    found = COVERS.search(text)
    return int(found.group(1)) if found else None


def stale(text: str, functions: int) -> str | None:
    """Why a list file's text is stale against a not-slow set of `functions` test functions; None: current."""
    recorded = covered(text)
    if recorded is None:
        return "its header does not say how many test functions it measured (a list written before issue 43)"
    if functions > recorded * (1 + STALE_SHARE):
        return (f"it measured a set of {recorded} test functions; the not-slow set has {functions} now "
                f"(+{functions / recorded - 1:.0%}, more than {STALE_SHARE:.0%}), and the new ones were never timed")
    return None


def run_suite(out: Path, workers: int) -> None:
    env = {**os.environ, fast_budget.MEASURING_VARIABLE: str(out), "OMP_NUM_THREADS": "1"}
    env.pop(fast_budget.LIMIT_VARIABLE, None)
    print(f"running the not-slow set on {workers or 'no'} xdist workers (minutes) ...", file=sys.stderr)
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-n", str(workers),
                           "-m", "not slow"], cwd=ROOT, env=env, capture_output=True, text=True)
    if done.returncode not in (0, 1):  # 1: some tests failed; their time still counts, and they are named
        sys.exit(f"pytest stopped (exit {done.returncode}):\n{done.stdout[-3000:]}{done.stderr[-2000:]}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--threshold", type=float, default=1.0, help="CPU seconds (default 1.0)")
    parser.add_argument("--workers", type=int, default=2, help="pytest-xdist processes (0: serial; default 2)")
    parser.add_argument("--from", dest="measures", type=Path, help="the JSON of an earlier measuring run")
    parser.add_argument("--save", type=Path, help="also keep this run's measures there (JSON, for --from)")
    parser.add_argument("--out", type=Path, default=OUT, help="the list to write (default tests/slow_measured.txt)")
    args = parser.parse_args()
    functions = len(fast_budget.fast_set_functions())
    if args.measures:
        measures = json.loads(args.measures.read_text(encoding="utf-8"))
    else:
        with tempfile.TemporaryDirectory() as tmp:
            run_suite(Path(tmp) / "measures.json", args.workers)
            measures = json.loads((Path(tmp) / "measures.json").read_text(encoding="utf-8"))
        if args.save:
            args.save.write_text(json.dumps(measures, indent=0, sort_keys=True), encoding="utf-8")
    if not measures:
        sys.exit("no measures: the run timed no test (was tests/fast_budget.py loaded?)")
    cpu = {nodeid: m["cpu"] for nodeid, m in measures.items()}
    slow = sorted((n for n, seconds in cpu.items() if seconds >= args.threshold), key=lambda n: -cpu[n])
    failed = sorted(n for n, m in measures.items() if m["failed"])
    wall = sum(m["wall"] for m in measures.values())
    header = [f"# Tests of the not-slow set taking >= {args.threshold:g} s of CPU time (setup + call + teardown, one torch",
              "# thread) in one run; tests/fast_budget.py marks each slow. Written by scripts/measure_slow_tests.py",
              "# (rerun it after adding tests: tests/test_env_suite_bounds.py says when the list is stale); one node id",
              f"# per line, slowest first. {len(slow)} of {len(cpu)} tests, {sum(cpu[n] for n in slow):.0f} s of "
              f"{sum(cpu.values()):.0f} s CPU ({wall:.0f} s wall).",
              f"# covers {functions} test functions (fast_budget.fast_set_functions, parameters left out)"]
    args.out.write_text("\n".join(header + slow) + "\n", encoding="utf-8")
    print(f"{args.out}: {len(slow)} of {len(cpu)} tests >= {args.threshold:g} s CPU "
          f"({sum(cpu[n] for n in slow):.0f} s of {sum(cpu.values()):.0f} s; {wall:.0f} s wall)")
    if failed:
        print(f"{len(failed)} tests failed in the measuring run (measured all the same): " + ", ".join(failed[:20]),
              file=sys.stderr)


if __name__ == "__main__":
    main()
