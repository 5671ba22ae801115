"""Fake vendor plugin packages, compiled with this machine's gcc: each breaks at import the way real plugins
do (a segfault, an abort, a library found only through LD_LIBRARY_PATH, a shadowing copy of that library,
a PyTorch C++ symbol of another release, an extension built for another Python, a hang)."""

from __future__ import annotations

import shutil
import subprocess
import sys
import sysconfig
from dataclasses import dataclass
from pathlib import Path

import pytest

HAVE_GCC = shutil.which("gcc") is not None
needs_gcc = pytest.mark.skipif(not HAVE_GCC, reason="needs gcc to build the fake plugins")

_EXTENSION = """\
#include <Python.h>
#include <signal.h>
#include <stdlib.h>
#include <unistd.h>
%(decl)s
static struct PyModuleDef def = {PyModuleDef_HEAD_INIT, "_C", NULL, -1, NULL};
PyMODINIT_FUNC PyInit__C(void) {
    %(body)s
    return PyModule_Create(&def);
}
"""

# name -> (declarations, PyInit body, link against libdep)
_PLUGINS = {
    "fp_ok": ("", "", False),
    "fp_segv": ("", "volatile int *p = NULL; *p = 1;", False),
    "fp_abort": ("", "abort();", False),
    "fp_dep": ("int dep_value(void);", "if (dep_value() != 42) return NULL;", True),
    "fp_cxx": ("int _ZN3c1019fake_removed_symbolEv(void);", "_ZN3c1019fake_removed_symbolEv();", False),
    "fp_spin": ("", "for (;;) pause();", False),  # stuck in native code, holding the GIL
}


@dataclass
class FakePlugins:
    root: Path  # on PYTHONPATH: the packages
    lib: Path  # holds the right libdep.so
    shadow: Path  # holds a libdep.so without dep_value
    second_gomp: Path  # a libgomp.so.9 that fp_gomp does not need (fp_gomp links gomp1/libgomp-fl1.so)

    def env(self, *, ld: list[Path] | None = None, extra_path: list[Path] | None = None,
            preload: list[Path] | None = None) -> dict[str, str]:
        import os

        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(map(str, [*(extra_path or []), self.root]))
        if ld is None:
            env.pop("LD_LIBRARY_PATH", None)
        else:
            env["LD_LIBRARY_PATH"] = os.pathsep.join(map(str, ld))
        env["OMP_NUM_THREADS"] = "1"
        if preload:
            env["LD_PRELOAD"] = " ".join(map(str, preload))
        return env


def _gcc(*args: str | Path) -> None:
    subprocess.run(["gcc", "-shared", "-fPIC", "-O0", *map(str, args)], check=True, capture_output=True)


def build(root: Path) -> FakePlugins:
    """Build every fake plugin under `root`."""
    include = sysconfig.get_paths()["include"]
    suffix = sysconfig.get_config_var("EXT_SUFFIX")
    lib, shadow, pkgs = root / "lib", root / "shadow", root / "site"
    for folder in (lib, shadow, pkgs):
        folder.mkdir(parents=True)
    (root / "dep.c").write_text("int dep_value(void) { return 42; }\n")
    (root / "shadow.c").write_text("int other_value(void) { return 0; }\n")
    _gcc(root / "dep.c", "-o", lib / "libdep.so")
    _gcc(root / "shadow.c", "-o", shadow / "libdep.so")
    for name, (decl, body, link) in _PLUGINS.items():
        package = pkgs / name
        package.mkdir()
        (package / "__init__.py").write_text('from . import _C\n__version__ = "1.0"\n')
        source = root / f"{name}.c"
        source.write_text(_EXTENSION % {"decl": decl, "body": body})
        extra = ["-L", lib, "-ldep"] if link else []
        _gcc(f"-I{include}", source, "-o", package / f"_C{suffix}", *extra)
    # two copies of one runtime library (as a wheel's bundled libgomp-HASH.so.1 next to the system's libgomp.so.1)
    for folder, soname in (("gomp1", "libgomp-fl1.so"), ("gomp2", "libgomp.so.9")):
        (root / folder).mkdir()
        (root / f"{folder}.c").write_text(f"int {folder}_value(void) {{ return 1; }}\n")
        _gcc(root / f"{folder}.c", f"-Wl,-soname,{soname}", "-o", root / folder / soname)
    package = pkgs / "fp_twogomp"
    package.mkdir()
    (package / "__init__.py").write_text("from . import _C\n")
    _gcc(f"-I{include}", root / "fp_ok.c", "-o", package / f"_C{suffix}", "-Wl,--no-as-needed",
         f"-Wl,-rpath,{root / 'gomp1'}:{root / 'gomp2'}", root / "gomp1" / "libgomp-fl1.so",
         root / "gomp2" / "libgomp.so.9")
    package = pkgs / "fp_gomp"  # the first copy only; LD_PRELOAD of the second makes two
    package.mkdir()
    (package / "__init__.py").write_text("from . import _C\n")
    _gcc(f"-I{include}", root / "fp_ok.c", "-o", package / f"_C{suffix}", "-Wl,--no-as-needed",
         f"-Wl,-rpath,{root / 'gomp1'}", root / "gomp1" / "libgomp-fl1.so")
    # built for another CPython: the import system does not even look at it
    other = f"cpython-{sys.version_info.major}{sys.version_info.minor - 1}"
    package = pkgs / "fp_oldabi"
    package.mkdir()
    (package / "__init__.py").write_text("from . import _C\n")
    _gcc(f"-I{include}", root / "fp_ok.c", "-o", package / f"_C.{other}-x86_64-linux-gnu.so")
    exit_crash = pkgs / "fp_atexit"  # imports fine, then crashes the interpreter at exit
    exit_crash.mkdir()
    (exit_crash / "__init__.py").write_text("import atexit, os, signal\n"
                                            "atexit.register(lambda: os.kill(os.getpid(), signal.SIGSEGV))\n")
    hang = pkgs / "fp_hang"
    hang.mkdir()
    (hang / "__init__.py").write_text("import time\ntime.sleep(600)\n")
    return FakePlugins(root=pkgs, lib=lib, shadow=shadow, second_gomp=root / "gomp2" / "libgomp.so.9")
