"""Write tests/slow_measured.txt: the tests of the not-slow set that take THRESHOLD seconds or more
(setup, call and teardown together), measured in one serial run on this machine (run it quiet: nothing
else busy). tests/fast_budget.py marks each listed test slow, so `make test-fast` skips it and `make test`
runs it. Tests decorated @pytest.mark.slow by hand are not measured again (they stay slow).

    python scripts/measure_slow_tests.py [--threshold 1.0] [--from LOG]

--from LOG reads the durations of an earlier run (`pytest -m "not slow" --durations=0 -p no:xdist`, made
with TORCH_FL_TEST_MEASURING=1 so that no list was applied) instead of running the suite.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "tests" / "slow_measured.txt"
DURATION = re.compile(r"^\s*([\d.]+)s (?:call|setup|teardown)\s+(\S.*?)\s*$")


def durations(log: str) -> dict[str, float]:
    """node id -> seconds of setup + call + teardown, from pytest's --durations lines."""
    total: dict[str, float] = {}
    for line in log.splitlines():
        found = DURATION.match(line)
        if found:
            total[found.group(2)] = total.get(found.group(2), 0.0) + float(found.group(1))
    return total


def run_suite() -> str:
    env = {**os.environ, "TORCH_FL_TEST_MEASURING": "1"}
    env.pop("TORCH_FL_TEST_FAST_LIMIT", None)
    print("running the not-slow set serially with --durations=0 (several minutes) ...", file=sys.stderr)
    done = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-p", "no:xdist", "-m",
                           "not slow", "--durations=0"], cwd=ROOT, env=env, capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(f"the suite failed (exit {done.returncode}); fix it before measuring:\n{done.stdout[-3000:]}")
    return done.stdout


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--threshold", type=float, default=1.0, help="seconds (default 1.0)")
    parser.add_argument("--from", dest="log", type=Path, help="a log of an earlier run to read instead")
    args = parser.parse_args()
    measured = durations(args.log.read_text(encoding="utf-8") if args.log else run_suite())
    if not measured:
        sys.exit("no --durations lines found: run pytest with --durations=0")
    slow = sorted((nodeid for nodeid, seconds in measured.items() if seconds >= args.threshold),
                  key=lambda nodeid: -measured[nodeid])
    header = [f"# Tests of the not-slow set taking >= {args.threshold:g} s (setup + call + teardown) in a serial run",
              "# on the shared 2-core machine; tests/fast_budget.py marks each slow. Written by",
              "# scripts/measure_slow_tests.py (rerun it there, quiet, after adding slow tests); one node id per line,",
              f"# slowest first. {len(slow)} of the {len(measured)} tests pytest timed (over 5 ms), "
              f"{sum(measured[n] for n in slow):.0f} s of {sum(measured.values()):.0f} s."]
    OUT.write_text("\n".join(header + slow) + "\n", encoding="utf-8")
    print(f"{OUT.relative_to(ROOT)}: {len(slow)} tests >= {args.threshold:g} s "
          f"({sum(measured[n] for n in slow):.0f} s of {sum(measured.values()):.0f} s)")


if __name__ == "__main__":
    main()
