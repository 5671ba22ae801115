"""Run fixture programs in one process and say, per program, what it printed, whether it raised, and
which CUDA-only functions its own code called (a profile hook on calls from the program's frames into
``torch/cuda/``; availability queries, which answer everywhere, do not count). Used by
test_target.py: ``python target_runner.py PROGRAM...`` prints one JSON line per program."""

from __future__ import annotations

import contextlib
import io
import json
import os
import runpy
import sys
import warnings

ANSWERS_EVERYWHERE = frozenset({"is_available", "device_count", "is_initialized"})


def run(path: str) -> dict[str, object]:
    target = os.path.realpath(path)
    calls: list[str] = []

    def profile(frame, event, arg):  # type: ignore[no-untyped-def]
        if event == "call":
            code = frame.f_code
            caller = frame.f_back
            if (f"{os.sep}torch{os.sep}cuda{os.sep}" in code.co_filename and caller is not None
                    and caller.f_code.co_filename == target and code.co_name not in ANSWERS_EVERYWHERE):
                calls.append(f"{code.co_name} (line {caller.f_lineno})")

    out = io.StringIO()
    status = "ok"
    sys.setprofile(profile)
    try:
        with contextlib.redirect_stdout(out), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            runpy.run_path(target, run_name="__main__")
    except BaseException as exc:  # the program's failure is the result
        status = f"{type(exc).__name__}: {exc}".splitlines()[0]
    finally:
        sys.setprofile(None)
    return {"path": os.path.basename(path), "stdout": out.getvalue(), "status": status, "cuda_calls": calls}


if __name__ == "__main__":
    for program in sys.argv[1:]:
        print(json.dumps(run(program)), flush=True)
