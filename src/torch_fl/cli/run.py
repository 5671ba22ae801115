"""`torchfl run`: run an unmodified CUDA-hard-coded script on torch.fl.device() (the CUDA alias).

Exit status: the script's (0 when it returns, its ``sys.exit`` code, 1 when it raises).
"""

from __future__ import annotations

import argparse
import os
import runpy
import sys
import traceback

from .args import add_device


def add_parser(sub: argparse._SubParsersAction, name: str, help_text: str) -> None:
    parser = sub.add_parser(
        name, help=help_text,
        description="Run a Python script or module as `python` would, with the CUDA alias enabled: "
                    "'cuda' device arguments, .cuda(), torch.cuda.* calls, CUDA autocast and GradScaler, "
                    "and the 'nccl' backend go to torch.fl.device() and its description. The script is "
                    "not modified. FL_LOG=migrate=INFO logs each aliased call site once.",
        epilog="Examples:\n"
               "  torchfl run train.py --batch_size=8\n"
               "  FL_DEVICE=emu:minimal torchfl run train.py\n"
               "  torchfl run --device cpu -m mypkg.train --epochs 1\n"
               "  torchfl run --report train.py      # + what the alias answered in place of CUDA\n"
               "  torchrun --nproc_per_node=2 --no-python torchfl run train.py\n"
               "\nExit status: the script's. Docs: docs/migrate-runtime.md",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    add_device(parser, what="where CUDA requests run")
    parser.add_argument("--report", action="store_true",
                        help="after the script, print to stderr which CUDA queries the alias answered from the "
                             "description (capability, properties, ...) and which CUDA settings it accepted")
    parser.add_argument("-m", dest="module", nargs=argparse.REMAINDER, metavar="MODULE [ARGS]",
                        help="run a library module as a script (as python -m), with its arguments")
    parser.add_argument("script", nargs=argparse.REMAINDER, metavar="SCRIPT [ARGS]",
                        help="the script to run, with its arguments")


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


def run(args: argparse.Namespace) -> int:
    from ..migrate.alias import active, cuda_alias

    if args.module is not None:
        if not args.module:
            print("torchfl run: -m needs a module name", file=sys.stderr)
            return 2
        script, module, argv = None, args.module[0], args.module[1:]
    elif args.script:
        script, module, argv = args.script[0], None, args.script[1:]
        if not os.path.isfile(script):
            print(f"torchfl run: {script}: no such file", file=sys.stderr)
            return 2
    else:
        print("torchfl run: give a script (torchfl run train.py ARGS) or a module (-m MODULE ARGS)",
              file=sys.stderr)
        return 2
    alias = active()
    if alias is not None:  # FL_CUDA_ALIAS=1 already enabled it when torch was imported
        if args.device:
            print(f"torchfl run: FL_CUDA_ALIAS is set: the alias targets torch.fl.device(), not "
                  f"--device {args.device}", file=sys.stderr)
        code = run_target(script, module, argv)
    else:
        with cuda_alias(args.device) as alias:
            code = run_target(script, module, argv)
    if args.report:
        print(alias.report(), file=sys.stderr)
    return code
