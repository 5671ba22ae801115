"""Bad inputs and the message each gives: the source of docs/errors.md.

Each case runs in-process (the CLI's ``main`` or a Python snippet) in a fresh temporary folder with a clean
FL_* environment; the message it prints goes into the doc. tests/test_env_errors_doc.py runs every case
again, checks it against `expect`, and checks the doc is exactly what this script writes.

    python scripts/error_cases.py            # print the page
    python scripts/error_cases.py --write    # rewrite docs/errors.md
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import shlex
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "errors.md"
PWD = "$PWD"


@dataclass(frozen=True)
class Case:
    what: str                       # the bad input, in words
    argv: tuple[str, ...] = ()      # torchfl arguments, or
    code: str = ""                  # a Python snippet (after `import torch, torch_fl`)
    env: dict[str, str] = field(default_factory=dict)
    files: dict[str, bytes] = field(default_factory=dict)  # created in the working folder first
    expect: str = ""                # the message must contain this
    rc: int = 1
    show: str = "stderr"            # where the message is: stderr, doctor (JSON problems/warnings), stdout
    fresh: bool = False             # in a new process (what happens at `import torch_fl`)
    no_torch: bool = False          # in a new process where torch cannot be imported (a pre-commit hook env)


BINARY = bytes(range(256)) * 4
UTF16_PYPROJECT = '[tool.torch_fl]\ndevice = "acc0"\n'.encode("utf-16")
LATIN1 = 'schema = 1\nname = "caf\xe9"\n'.encode("latin-1")

CASES: tuple[Case, ...] = (
    # Environment variables (the typed layer, torch_fl/_env.py)
    Case("`FL_LOG` with a value that is not a level: a warning, `--help` (and `import torch_fl`) still work",
         ("--help",), env={"FL_LOG": "garbage"}, expect="FL_LOG: 'garbage' is not a log level", rc=0,
         fresh=True),
    Case("`FL_LOG` naming a logger that does not exist", ("doctor", "--json"),
         env={"FL_LOG": "dispach=DEBUG"}, expect="Did you mean 'dispatch'?", show="doctor"),
    Case("`FL_FALLBACK` misspelt (it used to turn strict mode off silently)", code="torch.fl.activate('cpu')",
         env={"FL_FALLBACK": "eror"}, expect="FL_FALLBACK: 'eror' is not one of: warn, error. Did you mean 'error'?"),
    Case("`FL_ROUTE` naming an operator that does not exist (it used to be ignored)", ("doctor", "--json"),
         env={"FL_ROUTE": "aten::gleu=fallback"}, expect="Did you mean 'aten::gelu'?", show="doctor"),
    Case("`FL_ROUTE` with an unknown route", code="torch.fl.route_table('cpu')",
         env={"FL_ROUTE": "aten::gelu=fallbak"}, expect="Did you mean 'fallback'?"),
    Case("`FL_ROUTE` setting one operator twice (it used to be 'last wins')", code="torch.fl.route_table('cpu')",
         env={"FL_ROUTE": "aten::gelu=translate,gelu=fallback"}, expect="is setting aten::gelu twice"),
    Case("`FL_DEVICE_MAP` setting one id twice", code="torch.fl.devices()",
         env={"FL_DEVICE_MAP": "acc0=cpu,acc0=meta"}, expect="is setting 'acc0' twice"),
    Case("`FL_CACHE_KEEP` not a number (doctor used to call it healthy)", ("doctor", "--json"),
         env={"FL_CACHE_KEEP": "abc"}, expect="FL_CACHE_KEEP: 'abc' is not a whole number >= 1", show="doctor"),
    Case("`FL_COLLECTIVE_TIMEOUT` not a number (doctor used to call it healthy)", ("doctor", "--json"),
         env={"FL_COLLECTIVE_TIMEOUT": "abc"}, expect="FL_COLLECTIVE_TIMEOUT: 'abc' is not a number of seconds",
         show="doctor"),
    Case("`FL_COLLECTIVE_TIMEOUT=nan` (it used to be a raw ValueError)", code="torch.fl.distributed.collective_timeout()",
         env={"FL_COLLECTIVE_TIMEOUT": "nan"}, expect="FL_COLLECTIVE_TIMEOUT: 'nan' is not a number of seconds >= 0"),
    Case("`FL_COLLECTIVE_TIMEOUT=inf` (it used to be an OverflowError)", code="torch.fl.distributed.collective_timeout()",
         env={"FL_COLLECTIVE_TIMEOUT": "inf"}, expect="FL_COLLECTIVE_TIMEOUT: 'inf' is not a number of seconds >= 0"),
    Case("`FL_PREFLIGHT` not a boolean", code="torch.fl.distributed.preflight_enabled()",
         env={"FL_PREFLIGHT": "maybe"}, expect="is neither on (1, true, yes, on) nor off (0, false, no, off)"),
    Case("`FL_ROUTE_LOG` in a folder that does not exist (the log used to be lost at exit)",
         code="torch.fl.activate('cpu')", env={"FL_ROUTE_LOG": "missing/route-log.json"},
         expect="is in a folder that does not exist (missing); create the folder first"),
    Case("A misspelt variable name", ("doctor", "--json"), env={"FL_DEVCE": "acc0"},
         expect="FL_DEVCE is set but torch-fl reads no such variable. Did you mean 'FL_DEVICE'?", rc=0, show="doctor"),
    Case("`FL_DEVICE=emu:NAME` with an unknown description", ("doctor", "--json"), env={"FL_DEVICE": "emu:nosuch"},
         expect="no device description named 'nosuch'", show="doctor"),
    # Files
    Case("`FL_DESCRIPTION` naming a binary file (it used to be a UnicodeDecodeError traceback)", ("describe",),
         env={"FL_DESCRIPTION": "blob.bin"}, files={"blob.bin": BINARY},
         expect="blob.bin: not a description file: the file is binary", rc=2),
    Case("`FL_DESCRIPTION` naming a folder", ("describe",), env={"FL_DESCRIPTION": "."},
         expect="FL_DESCRIPTION names a folder, not a description file", rc=2),
    Case("`torchfl describe FILE` with a Latin-1 file", ("describe", "latin1.toml"), files={"latin1.toml": LATIN1},
         expect="latin1.toml: not a description file: line 2: byte 0xe9 is not UTF-8", rc=2),
    Case("A binary `torch_fl.toml` in the working folder", ("describe",), files={"torch_fl.toml": BINARY},
         expect="torch_fl.toml: cannot read the torch-fl config: the file is binary", rc=2),
    Case("A UTF-16 `pyproject.toml` in the working folder", ("describe",), files={"pyproject.toml": UTF16_PYPROJECT},
         expect="pyproject.toml: cannot read the torch-fl config: the file is UTF-16-encoded", rc=2),
    Case("`torchfl describe -o` into a folder that does not exist", ("describe", "cpu", "-o", "nowhere/cpu.toml"),
         expect="nowhere/cpu.toml: No such file or directory", rc=2),
    Case("A description file named like a built-in (allowed; `describe --list` and doctor warn)",
         ("describe", "--list"), env={"FL_DESCRIPTION": "cpu.toml"}, files={"cpu.toml": b"@builtin-cpu"},
         expect="the built-in 'cpu' description is replaced by cpu.toml (FL_DESCRIPTION)", rc=0),
    Case("An unknown description name", ("describe", "cdua"), expect="no device description named 'cdua'. Did you mean 'cuda'?", rc=2),
    Case("A model factory that raises (the user's code, not a torch-fl bug)", ("warmup", "model.py:factory"),
         files={"model.py": b"def factory():\n    raise ValueError('my model is broken')\n"},
         expect="error in your code (model.py, line 2): ValueError: my model is broken"),
    # Arguments
    Case("`torchfl preflight --nproc 0` (it used to start 2 ranks)", ("preflight", "--nproc", "0"),
         expect="argument --nproc: must be a whole number >= 1, got '0'", rc=2),
    Case("`torchfl preflight --timeout -1` (it used to blame firewalls)", ("preflight", "--timeout", "-1"),
         expect="argument --timeout: must be a number of seconds > 0, got '-1'", rc=2),
    Case("`torchfl compare --rtol nan` (it used to compare nothing: NaN tolerances pass every layer)",
         ("compare", "model.py:factory", "--device", "cpu", "--rtol", "nan"),
         expect="--rtol must be a finite number >= 0, got nan", rc=2),
    Case("`torchfl bugreport --log` with a file that does not exist", ("bugreport", "--log", "nope.log"),
         expect="--log nope.log: no such file", rc=2),
    Case("`torchfl bugreport` with an unknown `FL_DEVICE`: still a report (rc 0) that lists the problem",
         ("bugreport",), env={"FL_DEVICE": "nosuch"}, expect="1. device 'nosuch' (from FL_DEVICE)", rc=0,
         show="stdout"),
    # Files that scan and fix meet (issue 22, item 3; this block is kept by the migrate helper)
    Case("`torchfl scan` on a FIFO (it used to block forever)",
         code='import os; from torch_fl.cli import main; os.mkfifo("pipe.py"); raise SystemExit(main(["scan", "pipe.py"]))',
         expect="pipe.py: skipped: a FIFO, not a regular file", rc=0),
    Case("`torchfl fix` on a FIFO in a folder (it used to block forever)",
         code='import os; from torch_fl.cli import main; os.mkfifo("pipe.py"); raise SystemExit(main(["fix", "."]))',
         expect="pipe.py: skipped: a FIFO, not a regular file", rc=0),
    Case("`torchfl scan /dev/zero` (it used to end in MemoryError, an internal error)", ("scan", "/dev/zero"),
         expect="/dev/zero: skipped: a character device, not a regular file", rc=0),
    Case("A symlink loop in a scanned folder (it used to abort the whole scan)",
         code='import os; from torch_fl.cli import main; os.symlink("b.py", "a.py"); os.symlink("a.py", "b.py"); '
              'raise SystemExit(main(["scan", "."]))',
         files={"train.py": b"x = x.cuda()\n"}, expect="a.py: skipped: a symlink loop", rc=1),
    Case("`torchfl scan f.py --output f.py` (it used to overwrite the source with the report)",
         ("scan", "f.py", "--output", "f.py"), files={"f.py": b"x = x.cuda()\n"},
         expect="--output f.py is a file being scanned", rc=2),
    Case("`torchfl fix` on a hard-linked file (the atomic write used to split it from its other names)",
         code='import os; from torch_fl.cli import main; os.link("f.py", "g.py"); raise SystemExit(main(["fix", "f.py"]))',
         files={"f.py": b"x = x.cuda()\n"}, expect="f.py: hard-linked file (2 links), not changed"),
    Case("`torchfl fix` keeps a CR-only file's last line ending (it used to drop the final `\\r`)",
         code='import sys; from torch_fl.cli import main; main(["fix", "cr.py"]); '
              'print(repr(open("cr.py", "rb").read()[-12:]), file=sys.stderr)',
         files={"cr.py": b"import torch\rx = y.cuda()\r"}, expect="device())\\r'", rc=0),
    Case("`torchfl fix` keeps the file's permission bits (owner and group too: tests/migrate/test_file_safety.py)",
         code='import os, sys; from torch_fl.cli import main; os.chmod("f.py", 0o640); main(["fix", "f.py"]); '
              'print("mode after fix:", oct(os.stat("f.py").st_mode & 0o777), file=sys.stderr)',
         files={"f.py": b"x = x.cuda()\n"}, expect="mode after fix: 0o640", rc=0),
    # Settings, cache, secrets, numbers, the torch-free CLI (issue 22; this block is kept by the settings helper)
    Case("A config file's `[routes]` naming an operator that does not exist (it used to be accepted)",
         code="torch.fl.route_table('cpu')", files={"torch_fl.toml": b'[routes]\n"aten::gleu" = "translate"\n'},
         expect="torch_fl.toml: routes: 'aten::gleu' is not an aten operator of this torch. Did you mean 'aten::gelu'?"),
    Case("A config file's `log` naming a logger that does not exist (it used to be accepted, and `log` was never applied)",
         ("doctor", "--json"), files={"torch_fl.toml": b'log = "dispach=DEBUG"\n'},
         expect="log: 'dispach' is not a torch_fl logger; loggers: compile", show="doctor"),
    Case("A config file's `device_map` with a key `FL_DEVICE_MAP` refuses (it used to be accepted)",
         code="torch.fl.devices()", files={"torch_fl.toml": b'device_map = { acc01 = "cpu" }\n'},
         expect="torch_fl.toml: device_map: 'acc01' is not a virtual id like acc0"),
    Case("A misspelt config key", code="torch.fl.device()", files={"torch_fl.toml": b'devcie = "acc0"\n'},
         expect="torch_fl.toml: unknown key 'devcie'. Did you mean 'device'?"),
    Case("`FL_CONFIG` naming a file that does not exist (it used to be ignored)", code="torch.fl.device()",
         env={"FL_CONFIG": "nope.toml"}, expect="FL_CONFIG: nope.toml does not exist; it names the user config file"),
    Case("A user description's `ops.fallback` naming an operator that does not exist (it used to do nothing; "
         "refused when the file loads)",
         code="torch.fl.route_table('gleu-chip')", env={"FL_DESCRIPTION": "gleu.toml"},
         files={"gleu.toml": b'schema = 1\nname = "gleu-chip"\ndevice_type = "cpu"\ndispatch_key = "CPU"\n'
                             b'[ops]\nfallback = ["aten::gleu"]\n'},
         expect="gleu.toml:6: [ops.fallback] 'aten::gleu' is not an aten operator of this torch. Did you mean "
                "'aten::gelu'?"),
    Case("A description named `\"chip\\n\"` (the trailing newline used to pass the name check)",
         ("describe", "nl.toml"), files={"nl.toml": b'schema = 1\nname = "chip\\n"\ndevice_type = "cpu"\n'
                                                    b'dispatch_key = "CPU"\n'},
         expect="[name] 'chip\\n' is not a valid name", rc=2),
    Case("Two descriptions of one name in one `FL_DESCRIPTION_PATH` folder (the last used to win silently)",
         ("describe", "--list"), env={"FL_DESCRIPTION_PATH": "."},
         files={"a.toml": b'schema = 1\nname = "twin"\ndevice_type = "cpu"\ndispatch_key = "CPU"\n',
                "b.toml": b'schema = 1\nname = "twin"\ndevice_type = "cpu"\ndispatch_key = "CPU"\n'},
         expect="describe 'twin': a.toml and b.toml. Fix: keep one of them", rc=2),
    Case("`FL_EMU_DEVICES` over Python's int range, at import (it used to be an OverflowError traceback)",
         ("doctor", "--json"), env={"FL_EMU_DEVICES": "99999999999999999999", "FL_DEVICE": "emu:cpu"}, fresh=True,
         expect="FL_EMU_DEVICES: '<redacted>' is not a whole number >= 1 (at most 1024, in ASCII digits",
         show="doctor"),
    Case("`FL_EMU_DEVICES` in Arabic-Indic digits (Python's int() used to accept them)", ("doctor", "--json"),
         env={"FL_EMU_DEVICES": "\u0661\u0660"}, expect="is not a whole number >= 1 (at most 1024, in ASCII digits",
         show="doctor"),
    Case("`FL_CACHE_KEEP=1_0` (Python's int() used to read it as 10)", ("doctor", "--json"), env={"FL_CACHE_KEEP": "1_0"},
         expect="FL_CACHE_KEEP: '1_0' is not a whole number >= 1 (at most 1000, in ASCII digits", show="doctor"),
    Case("`FL_COLLECTIVE_TIMEOUT=1e308` (doctor used to call it healthy; the timer then overflowed)",
         code="torch.fl.distributed.collective_timeout()", env={"FL_COLLECTIVE_TIMEOUT": "1e308"},
         expect="FL_COLLECTIVE_TIMEOUT: '1e308' is not a number of seconds >= 0 (at most 604800"),
    Case("`FL_CACHE_DIR=/` (it used to be offered a clear)", ("cache", "clear", "--all"), env={"FL_CACHE_DIR": "/"},
         expect="compile cache root / (from FL_CACHE_DIR) is refused: it is the file system root", show="stdout"),
    Case("`FL_CACHE_DIR` set to the home folder", ("cache", "info"), env={"FL_CACHE_DIR": PWD},
         expect="is refused: it is your home directory", show="stdout"),
    Case("`torchfl cache clear --all` with a folder torch-fl did not create under the root (it used to be deleted)",
         code='import os; from torch_fl.cli import main; os.makedirs("cache/photos", mode=0o700); '
              'os.chmod("cache", 0o700); raise SystemExit(main(["cache", "clear", "--all"]))',
         expect="cache/photos: torch-fl did not create it", rc=0),
    Case("An altered compiled artifact whose mtime was put back (the size+mtime check used to load it)",
         code="import os, sys; from torch_fl.compiler import cache; from torch_fl.description import registry\n"
              "e = cache.open_entry(registry.get('cpu')); p = e.inductor_dir / 'fx.pkl'; p.write_bytes(b'graph')\n"
              "cache.seal(e); cache.release(); st = p.stat(); p.write_bytes(b'evil!'); "
              "os.utime(p, ns=(st.st_atime_ns, st.st_mtime_ns))\n"
              "print(cache.open_entry(registry.get('cpu')).quarantined[0], file=sys.stderr)",
         expect="its artifacts changed after they were recorded: inductor/fx.pkl: sha256", rc=0),
    Case("`torchfl describe /dev/zero` (it used to read until memory ran out)", ("describe", "/dev/zero"),
         expect="/dev/zero: cannot read the file: it is a character device, not a regular file", rc=2),
    Case("`FL_DESCRIPTION=/dev/zero` (it used to say the file does not exist)", ("describe",),
         env={"FL_DESCRIPTION": "/dev/zero"}, expect="FL_DESCRIPTION names a character device, not a description file", rc=2),
    Case("`torchfl describe` on a FIFO (it used to block forever)",
         code='import os; from torch_fl.cli import main; os.mkfifo("pipe.toml"); raise SystemExit(main(["describe", "pipe.toml"]))',
         expect="pipe.toml: cannot read the file: it is a FIFO (named pipe), not a regular file", rc=2),
    Case("`torchfl routes diff` on deeply nested JSON (it used to be a RecursionError, an internal error)",
         ("routes", "diff", "deep.json", "deep.json"), files={"deep.json": b"[" * 100000 + b"]" * 100000},
         expect="deep.json: not a route log: its JSON is nested too deeply to read", rc=2),
    Case("`torchfl routes diff /dev/zero` (it used to read forever)", ("routes", "diff", "/dev/zero", "/dev/zero"),
         expect="/dev/zero: cannot read it: it is a character device, not a regular file", rc=2),
    Case("`torchfl bugreport --log /dev/zero` (it used to say 'no such file')", ("bugreport", "--log", "/dev/zero"),
         expect="--log /dev/zero: it is a character device, not a log file", rc=2),
    Case("`torchfl aot --check /dev/zero` (it used to read forever)", ("aot", "--check", "/dev/zero"),
         expect="/dev/zero is not a readable AOT package (.pt2 zip archive): it is a character device"),
    Case("`torchfl run -m` a module that does not exist (it used to print runpy's traceback)",
         ("run", "-m", "no_such_module_fl"), expect="torchfl run: -m no_such_module_fl: No module named no_such_module_fl"),
    Case("A token in `FL_CONFIG`'s URL in the bug report's environment section (it used to leak)",
         ("bugreport",), env={"FL_CONFIG": "https://cfg.example.com/torch_fl.toml?token=abc123secretvalue"},
         expect="FL_CONFIG=https://cfg.example.com/torch_fl.toml?token=<redacted>", rc=0, show="stdout"),
    Case("A JWT, a Stripe key and a multi-word password in a log given to `torchfl bugreport` (they used to leak)",
         ("bugreport", "--log", "err.log"), files={"err.log": (
             b"auth eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxIn0.c2lnbmF0dXJl sk_live_4eC39HqLyjWDarjtT1zdp7dc\n"
             b"password: correct horse battery staple\n")},
         expect="auth <redacted> <redacted>", rc=0, show="stdout"),
    Case("`torchfl doctor` where torch is not installed (it used to end in ModuleNotFoundError)", ("doctor",),
         no_torch=True, expect="torchfl doctor: this command needs torch: pip install torch", rc=2),
    Case("`torchfl --version` where torch is not installed (it used to end in ModuleNotFoundError)", ("--version",),
         no_torch=True, expect="torch-fl ", rc=0, show="stdout"),
)


def _builtin_cpu() -> bytes:
    from torch_fl.description import registry

    return (registry.BUILTIN_DIR / "cpu.toml").read_bytes().replace(b'summary = "', b'summary = "site copy: ', 1)


def run(case: Case) -> tuple[int, str]:
    """(exit code, the message) of one case, run in a fresh temporary folder."""
    import torch_fl
    from torch_fl import _env
    from torch_fl.description import registry

    saved_env, saved_cwd = dict(os.environ), os.getcwd()
    with tempfile.TemporaryDirectory() as tmp:
        try:
            for name in list(os.environ):
                if name.startswith("FL_"):
                    del os.environ[name]
            os.environ.update({"HOME": tmp, "XDG_CONFIG_HOME": f"{tmp}/.config",
                               "FL_CACHE_DIR": f"{tmp}/cache", **{k: v.replace(PWD, tmp) for k, v in case.env.items()}})
            os.chdir(tmp)
            for name, data in case.files.items():
                Path(tmp, name).write_bytes(_builtin_cpu() if data == b"@builtin-cpu" else data)
            torch_fl.reset()
            registry.reload()
            rc, out, err = _execute(case)
        finally:
            os.chdir(saved_cwd)
            os.environ.clear()
            os.environ.update(saved_env)
            torch_fl.reset()
            registry.reload()
        assert _env  # the layer under test
        out, err = (text.replace(tmp + "/", "").replace(tmp, PWD) for text in (out, err))
        return rc, _message(case, out, err)


NO_TORCH = ROOT / "scripts" / "no_torch"  # a sitecustomize that blocks torch


def _execute(case: Case) -> tuple[int, str, str]:
    from torch_fl.cli import main

    if case.no_torch:  # torch blocked by a meta-path finder, as where it is not installed
        env = {**os.environ, "PYTHONPATH": str(NO_TORCH)}
        code = (f"import sys; sys.path.insert(0, {str(ROOT / 'src')!r}); import _torch_fl_cli; "
                f"sys.exit(_torch_fl_cli.main({list(case.argv)!r}))")
        done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=env)
        return done.returncode, done.stdout, done.stderr
    if case.fresh:
        done = subprocess.run([sys.executable, "-m", "torch_fl", *case.argv], capture_output=True, text=True,
                              timeout=300)
        return done.returncode, done.stdout, done.stderr

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            if case.argv:
                rc = main(list(case.argv))
            else:
                import torch

                import torch_fl

                exec(case.code, {"torch": torch, "torch_fl": torch_fl})
                rc = 0
        except SystemExit as exc:  # argparse
            rc = exc.code if isinstance(exc.code, int) else 1
        except Exception as exc:  # the API raises: the message is what a user's traceback ends with
            print(f"{type(exc).__name__}: {exc}", file=err)
            rc = 1
    return rc, out.getvalue(), err.getvalue()


def _message(case: Case, out: str, err: str) -> str:
    if case.show == "doctor":
        data = json.loads(out)
        return "\n".join(item for item in [*data["problems"], *data["warnings"]] if case.expect in item)
    if case.show == "stdout":
        return next((line for line in out.splitlines() if case.expect in line), out[-400:])
    lines = [line for line in err.splitlines() if line.strip() and not line.startswith("usage:")
             and not line.startswith(" ")]
    return next((line for line in lines if case.expect in line), "\n".join(lines[-2:]))


def _command(case: Case) -> str:
    env = " ".join(f"{k}={shlex.quote(v)}" for k, v in case.env.items())
    if case.argv:
        command = "torchfl " + shlex.join(case.argv)
    else:
        command = "python -c " + shlex.quote(f"import torch, torch_fl; {case.code}")
    files = ", ".join(f"`{name}`" for name in case.files)
    where = " (torch not installed)" if case.no_torch else ""
    return f"`{(env + ' ' + command).strip()}`" + (f" (with {files})" if files else "") + where


def render() -> str:
    lines = [
        "# Bad inputs and the errors they give",
        "",
        "torch-fl answers a bad input with one message that says what is wrong, what is allowed and how to fix "
        "it, never with a Python traceback (add `--debug`, or set `FL_LOG=DEBUG`, to see one). An error that "
        "is not the user's ends with a pointer to `torchfl bugreport`. Exit codes (the table in "
        "[cli.md](cli.md), one for every command): 0 ok (warnings may be printed), 1 a finding or a failure, 2 "
        "could not run as asked (a usage error, a bad input, a missing dependency), 130 interrupted.",
        "",
        "Generated by `python scripts/error_cases.py --write`; `tests/test_env_errors_doc.py` runs every case "
        "again and fails when a message changes. `$PWD` stands for the working folder. See also "
        "[env.md](env.md) (every variable and its type) and [troubleshooting.md](troubleshooting.md).",
        "",
    ]
    for case in CASES:
        rc, message = run(case)
        lines += [f"### {case.what}", "", _command(case) + f" → exit code {rc}", "", "```text",
                  message, "```", ""]
    return "\n".join(lines)


if __name__ == "__main__":
    text = render()
    if "--write" in sys.argv:
        DOC.write_text(text, encoding="utf-8")
        print(f"wrote {DOC}")
    else:
        sys.stdout.write(text)
