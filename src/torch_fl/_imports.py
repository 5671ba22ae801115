"""torch-fl's one import hook inside the package (`HOOK`, first on ``sys.meta_path`` once installed).

Two jobs, each asked for by name:

- **Modules torch-fl provides** (`provide`): a finder for a package that does not exist here, such as the
  emulated ``torch_npu`` (routing/emu/plugin.py), or another name of its own modules (``torch.fl.X`` is
  ``torch_fl.X``, ``__init__.py``). It is asked only for names under the package it registered, and only
  where no real package of that name exists (the provider checks before registering).
- **Work right after a module runs** (`after_import`): a callback when a heavy module is first imported,
  instead of importing it to patch it (the emulator's Inductor guard waits for
  ``torch._inductor.compile_fx``: importing Inductor at ``import torch_fl`` would cost seconds).

And one helper for a package's own names: `lazy_getattr`, the PEP 562 ``__getattr__`` that loads the
submodule defining a public name on first access (``torch_fl`` and ``torch_fl.migrate`` stay light).

The one outside the package, ``_torch_fl_alias`` (installed by a .pth file, it runs at interpreter start
and must import nothing), answers ``import torch.fl`` and, under an emulated FL_DEVICE, ``import torch_npu``
before ``import torch`` by handing the name to this hook.
"""

from __future__ import annotations

import importlib.abc
import sys
import threading
from collections.abc import Callable, Collection, Mapping
from typing import Any


class ImportHook(importlib.abc.MetaPathFinder):
    """Meta path finder: registered providers first, then the after-import callbacks of the name."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._providers: dict[str, Any] = {}  # package name -> a finder (find_spec) of it and its submodules
        self._after: dict[str, list[Callable[[Any], None]]] = {}

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> Any:
        if self._providers:
            parts = fullname.split(".")
            for end in range(1, len(parts) + 1):  # the package a provider registered, or one above the name
                provider = self._providers.get(".".join(parts[:end]))
                if provider is not None:
                    spec = provider.find_spec(fullname, path, target)
                    if spec is not None:
                        return spec
        if fullname not in self._after:
            return None
        with self._lock:
            callbacks = self._after.pop(fullname, [])
        spec = _spec_from_the_others(self, fullname, path, target)
        if not callbacks or spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        spec.loader = _AfterLoader(spec.loader, callbacks)
        return spec

    def provide(self, name: str, finder: Any) -> None:
        """Answer imports of the package `name` and its submodules with `finder` (it returns None for the
        names it leaves to the other finders)."""
        with self._lock:
            self._providers[name] = finder
        install()

    def provider(self, name: str) -> Any:
        return self._providers.get(name)

    def after_import(self, name: str, callback: Callable[[Any], None]) -> None:
        """Call `callback(module)` once `name` has run: now when it is imported already, else right after
        its first import."""
        module = sys.modules.get(name)
        if module is not None:
            callback(module)
            return
        with self._lock:
            self._after.setdefault(name, []).append(callback)
        install()


class _AfterLoader(importlib.abc.Loader):
    """The real loader of a module, then the callbacks waiting for it."""

    def __init__(self, loader: Any, callbacks: list[Callable[[Any], None]]) -> None:
        self._loader, self._callbacks = loader, callbacks

    def create_module(self, spec: Any) -> Any:
        return self._loader.create_module(spec)

    def exec_module(self, module: Any) -> None:
        self._loader.exec_module(module)
        for callback in self._callbacks:
            callback(module)


def _spec_from_the_others(hook: ImportHook, fullname: str, path: Any, target: Any) -> Any:
    for finder in sys.meta_path:
        if finder is hook or not hasattr(finder, "find_spec"):
            continue
        spec = finder.find_spec(fullname, path, target)
        if spec is not None:
            return spec
    return None


HOOK = ImportHook()


def install() -> None:
    """Put the hook first on sys.meta_path (once; it answers only the names registered with it)."""
    if HOOK not in sys.meta_path:
        sys.meta_path.insert(0, HOOK)


def provide(name: str, finder: Any) -> None:
    HOOK.provide(name, finder)


def after_import(name: str, callback: Callable[[Any], None]) -> None:
    HOOK.after_import(name, callback)

def lazy_getattr(namespace: dict[str, Any], names: Mapping[str, str], submodules: Collection[str] = (), *,
                 shown: str | None = None) -> Callable[[str], Any]:
    """The `__getattr__` of the package whose globals() are `namespace`: a name of `submodules` is that
    submodule (importing it binds it), a name of `names` is the attribute of the submodule it maps to (then
    bound in the package, so the next access is a plain lookup); any other name is the AttributeError Python
    gives, naming the package as `shown`."""
    package = namespace["__name__"]

    def __getattr__(name: str) -> Any:
        if name in submodules:
            return importlib.import_module(f"{package}.{name}")  # also binds it as the package's attribute
        module = names.get(name)
        if module is None:
            raise AttributeError(f"module '{shown or package}' has no attribute '{name}'")
        value = getattr(importlib.import_module(f"{package}.{module}"), name)
        namespace[name] = value
        return value

    return __getattr__
