"""Running a script or module as ``python`` does (sys.argv, sys.path, ``__main__``), in this process: what
`torchfl run` runs under the CUDA alias and `torchfl audit --script` under its audit."""

from __future__ import annotations

import os
import runpy
import sys
import traceback

__all__ = ["run_target"]

# frames of this runner (and of runpy, frozen or not) left out of a script's traceback, as python prints it
_OWN_FRAMES = frozenset({__file__, runpy.__file__, "<frozen runpy>"})


def _exit_code(exc: SystemExit) -> int:
    if exc.code is None:
        return 0
    if isinstance(exc.code, int):
        return exc.code
    print(exc.code, file=sys.stderr)  # sys.exit("message") prints the message and exits with 1
    return 1


def run_target(script: str | None, module: str | None, argv: list[str]) -> int:
    """Run `script` (a path) or `module` with sys.argv, sys.path and __main__ set as python does;
    return the exit code."""
    saved_argv, saved_path = sys.argv[:], sys.path[:]
    try:
        if module is not None:
            sys.argv = [module, *argv]
            sys.path.insert(0, os.getcwd())
            runpy.run_module(module, run_name="__main__", alter_sys=True)
        else:
            sys.argv = [script, *argv]
            sys.path.insert(0, os.path.dirname(os.path.abspath(script)))
            runpy.run_path(script, run_name="__main__")
    except SystemExit as exc:
        return _exit_code(exc)
    except KeyboardInterrupt:
        raise
    except BaseException:
        # As python prints it, without the frames of torchfl itself (and of runpy, frozen or not).
        etype, value, tb = sys.exc_info()
        while tb is not None and tb.tb_frame.f_code.co_filename in _OWN_FRAMES:
            tb = tb.tb_next
        if tb is None and isinstance(value, ImportError) and module is not None:
            # runpy could not find the module (or it is a package without __main__): no user code ran,
            # so no traceback, as `python -m missing` prints one line
            print(f"torchfl run: -m {module}: {value}. Fix: check the name, run from the folder that holds "
                  f"it (it is looked up from {os.getcwd()} and sys.path), or install its package.",
                  file=sys.stderr)
            return 1
        traceback.print_exception(etype, value, tb)
        return 1
    finally:
        sys.argv, sys.path[:] = saved_argv, saved_path
    return 0
