"""The ``torchfl`` console script. ``torchfl scan`` must start like a linter and run where torch is not
installed (pre-commit hook environments, CI lint jobs), but ``import torch_fl`` imports torch (it
installs ``torch.fl``). So this tiny top-level module is the entry point: for ``scan`` it registers
the ``torch_fl`` package *without running its __init__* (a bare package object whose ``__path__`` is
the real one, the way a namespace package is made), so that ``torch_fl.cli``, ``torch_fl.migrate`` and
the scanner, none of which import torch, load alone. Every other command imports torch_fl normally.

The bare package is only ever made in a process that runs ``torchfl scan`` and nothing else, or where
torch is not installed at all: there every command's help, ``--version`` and the torch-free commands
work, and the others say "this command needs torch: pip install torch" (torch_fl.cli) instead of ending
in a traceback. The real package is used as soon as anything imported torch_fl first. (Measured by
benchmarks/scan_speed.py: a one-file scan starts within 3x of ``python -c "import ast"``.)
"""

from __future__ import annotations

import os
import sys
import types

# Commands that need neither torch nor the torch.fl facade (`fix` needs libcst, and only for the files it
# cannot edit in place): they take the bare package even where torch is installed, so that a call does not pay
# torch's import (+1.6 CPU-s). The others run with the real package; without torch they say so. torch_fl.cli
# reads this set: one list.
TORCH_FREE = frozenset({"scan", "fix", "docs"})
_WITH_ACTIONS = frozenset({"routes", "cache"})  # `torchfl routes show --help`: help of an action


def _command(argv: list[str]) -> str | None:
    return next((a for a in argv if not a.startswith("-")), None)


def _bare_package() -> None:
    """Make ``torch_fl.<sub>`` importable without executing torch_fl/__init__.py."""
    if "torch_fl" in sys.modules:
        return
    # torch_fl/ sits next to this module (src/ in a checkout, site-packages when installed); no
    # importlib.util lookup: it costs a noticeable part of a linter's start-up.
    here = os.path.join(os.path.dirname(os.path.abspath(__file__)), "torch_fl")
    if not os.path.isfile(os.path.join(here, "__init__.py")):
        return  # an unusual layout: let the normal import find torch_fl
    package = types.ModuleType("torch_fl", "torch-fl (bare package for a torch-free command)")
    package.__path__ = [here]
    package.__file__ = os.path.join(here, "__init__.py")
    package.__package__ = "torch_fl"
    package.__torch_free__ = True  # type: ignore[attr-defined]  (torch_fl.cli: only TORCH_FREE commands run)
    sys.modules["torch_fl"] = package


def torch_missing() -> bool:
    """Whether `import torch` would fail for want of torch (a hook environment, a lint job)."""
    if "torch" in sys.modules:
        return sys.modules["torch"] is None
    import importlib.util  # only on this path: `torchfl scan` above must start fast

    try:
        return importlib.util.find_spec("torch") is None
    except (ImportError, ValueError):  # a meta-path finder that refuses torch, or torch set to None
        return True


def help_only(argv: list[str]) -> bool:
    """Whether argv asks only for help or the version (`torchfl`, `torchfl --help`, `torchfl grade --help`,
    `torchfl routes show -h`): argparse answers those before any command runs, so they take the bare
    package and never import torch (4-10 s). A -h after a command's first argument belongs to the command
    (`torchfl run script.py --help` is the script's, `torchfl describe npu -h` is answered the usual way)."""
    if not argv or argv[0] in ("-h", "--help", "--version"):
        return True
    words: list[str] = []
    for arg in argv:
        if arg in ("-h", "--help"):
            return True
        if arg == "--":
            return False
        if not arg.startswith("-"):
            words.append(arg)
            if len(words) > (2 if words[0] in _WITH_ACTIONS else 1):
                return False
    return False


def quiet_numpy_warning() -> None:
    """torch warns "Failed to initialize NumPy" at import where numpy is not installed; numpy is not a
    dependency of torch-fl or torch, so no command prints it (nor do the processes a command starts)."""
    import warnings

    warnings.filterwarnings("ignore", message="Failed to initialize NumPy", category=UserWarning)
    rule = "ignore:Failed to initialize NumPy:UserWarning"
    current = os.environ.get("PYTHONWARNINGS", "")
    if rule not in current:
        os.environ["PYTHONWARNINGS"] = f"{current},{rule}" if current else rule


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    quiet_numpy_warning()
    if help_only(argv) or (_command(argv) in TORCH_FREE and "--help" not in argv and "-h" not in argv) or \
            torch_missing():
        _bare_package()
    try:
        from torch_fl.cli import main as cli_main
    except RuntimeError as exc:
        if not _retry_without_autoload(argv, exc):
            raise
        raise AssertionError("unreachable: os.execv returned") from exc
    return cli_main(argv)


# The commands that diagnose an environment: a vendor plugin that torch imports by itself (a torch.backends
# entry point, as torch_npu registers) and that fails to load must not stop them before they start; they
# run again with the entry points off and report the plugin from a child process (analysis/plugin_load.py).
_DIAGNOSE = frozenset({"doctor", "bugreport", "env"})
_AUTOLOAD = "TORCH_DEVICE_BACKEND_AUTOLOAD"


def _retry_without_autoload(argv: list[str], exc: RuntimeError) -> bool:
    if _command(argv) not in _DIAGNOSE or "Failed to load the backend extension" not in str(exc) or \
            os.environ.get(_AUTOLOAD) == "0":
        return False
    print(f"torchfl {_command(argv)}: `import torch` fails: {exc}\n"
          f"  running again with {_AUTOLOAD}=0 (torch's backend entry points off) to diagnose it",
          file=sys.stderr)
    sys.stderr.flush()
    os.environ[_AUTOLOAD] = "0"
    os.environ["TORCH_FL_AUTOLOAD_FAILED"] = str(exc)  # doctor reports it (analysis/doctor.AUTOLOAD_FAILED)
    os.execv(sys.executable, [sys.executable, "-m", "_torch_fl_cli", *argv])
    return True  # (execv does not return)


if __name__ == "__main__":
    sys.exit(main())
