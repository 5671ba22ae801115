"""torch-fl's one import hook (torch_fl/_imports.py): packages it provides and work after a module's
first import, without importing that module itself."""

from __future__ import annotations

import importlib.machinery
import sys
import types

from torch_fl import _imports


def test_after_import_runs_once_right_after_the_first_import(tmp_path, monkeypatch):
    (tmp_path / "fl_hook_probe.py").write_text("VALUE = 1\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    seen = []
    _imports.after_import("fl_hook_probe", lambda module: seen.append(module.VALUE))
    assert seen == [] and "fl_hook_probe" not in sys.modules, "registering imports nothing"
    assert _imports.HOOK in sys.meta_path
    import fl_hook_probe
    assert seen == [1]
    del sys.modules["fl_hook_probe"]
    import fl_hook_probe  # noqa: F401,F811  (a second import: the callback ran once)
    assert seen == [1]
    del sys.modules["fl_hook_probe"]
    # a module imported already: the callback runs now
    _imports.after_import("json", lambda module: seen.append(module.__name__))
    assert seen == [1, "json"]


def test_a_provided_package_is_answered_by_its_finder():
    class Finder:
        def find_spec(self, fullname, path=None, target=None):
            if fullname != "fl_provided_pkg":
                return None
            return importlib.machinery.ModuleSpec(fullname, self)

        def create_module(self, spec):
            return types.ModuleType(spec.name)

        def exec_module(self, module):
            module.ANSWER = 42

    _imports.provide("fl_provided_pkg", Finder())
    try:
        import fl_provided_pkg
        assert fl_provided_pkg.ANSWER == 42
        assert _imports.HOOK.provider("fl_provided_pkg") is not None
    finally:
        sys.modules.pop("fl_provided_pkg", None)
        _imports.HOOK._providers.pop("fl_provided_pkg", None)
