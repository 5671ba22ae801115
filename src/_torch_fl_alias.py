"""Makes ``import torch.fl`` work before ``import torch_fl`` (installed through torch_fl_alias.pth).

Runs at interpreter start, so it must stay tiny: it imports nothing heavy and only installs a finder
that answers for the single name ``torch.fl``; torch and torch_fl load when that name is imported.
"""

import sys

# The frozen bootstrap module is always loaded; importing importlib.abc here would cost every
# interpreter start several milliseconds.
_ModuleSpec = sys.modules["_frozen_importlib"].ModuleSpec


class _TorchFLAlias:
    """Meta path finder and loader for the single name ``torch.fl``."""

    def find_spec(self, fullname, path=None, target=None):
        if fullname != "torch.fl":
            return None
        return _ModuleSpec(fullname, self)

    def create_module(self, spec):
        import importlib

        module = importlib.import_module("torch_fl")
        self._spec = module.__spec__
        return module

    def exec_module(self, module):
        # The import system stamped the alias spec on the module; give torch_fl its own back.
        module.__spec__ = self._spec


def autoload():
    """The ``torch.backends`` entry point: torch calls it during ``import torch``. It imports torch_fl
    only when ``FL_CUDA_ALIAS`` asks for the CUDA alias (torch_fl.migrate.autoload), or ``FL_DEVICE`` names
    an emulated chip (``emu:npu``: ``import torch`` alone then gives ``torch.npu`` and ``import torch_npu``,
    as the vendor's plugin does through this same hook)."""
    import os

    if _emulated_here():
        _emulate_at_import()
    value = os.environ.get("FL_CUDA_ALIAS", "")
    if value.strip().lower() in ("", "0", "false", "no", "off"):
        return
    try:
        from torch_fl.migrate.autoload import autoload as enable

        enable()
    except Exception as exc:
        # torch would wrap this in "Failed to load the backend extension: torch_fl" and bury the cause
        # in a chained traceback; the process cannot run as asked, so stop with the cause as the last line.
        raise SystemExit(_failure(value, exc)) from None


def _emulate_at_import():
    """Register the emulated chip while torch imports (torch_fl registers it when it loads)."""
    try:
        import torch_fl  # noqa: F401
    except Exception as exc:
        import os

        raise SystemExit(f"torch-fl: FL_DEVICE={os.environ.get('FL_DEVICE')} asks for an emulated chip, which "
                         f"did not start ({type(exc).__module__}.{type(exc).__name__}). Fix the cause below, "
                         f"or unset FL_DEVICE to run without emulation.\n{str(exc).strip()}") from None


def _failure(value, exc):
    """The message that ends a process whose CUDA alias did not start: what was asked, the cause (which
    names its setting), and how to run without the alias."""
    cause = str(exc).strip() or type(exc).__name__
    head = (f"torch-fl: FL_CUDA_ALIAS={value} asks for the CUDA alias, which did not start "
            f"({type(exc).__module__}.{type(exc).__name__}). Fix the cause below, or unset FL_CUDA_ALIAS "
            f"to run without the alias.")
    return f"{head}\n{cause}"


class _EmulatedPluginFirst:
    """Under ``FL_DEVICE=emu:NAME``: ``import torch_npu`` before ``import torch`` (as vendor code often starts).

    Last on ``sys.meta_path``, so it is asked only for a name no other finder has (never over an installed
    plugin): for a top-level ``torch_*`` name it imports torch, whose autoload hook registers the emulated chip
    and its plugin (torch_fl.routing.emu.plugin, answered by torch-fl's import hook), and hands the name to
    that hook."""

    _busy = False

    def find_spec(self, fullname, path=None, target=None):
        if path is not None or not fullname.startswith("torch_") or fullname.startswith("torch_fl") \
                or self._busy or "torch" in sys.modules:
            return None  # (with torch imported, the plugin's own finder, if any, is installed already)
        type(self)._busy = True
        try:
            import torch  # noqa: F401  (registers the emulated chip: autoload below)
        finally:
            type(self)._busy = False
        for finder in sys.meta_path:  # torch-fl's import hook (torch_fl._imports) answers the plugin
            if finder is not self and type(finder).__name__ == "ImportHook":
                spec = finder.find_spec(fullname, path, target)
                if spec is not None:
                    return spec
        return None


if not any(isinstance(finder, _TorchFLAlias) for finder in sys.meta_path):
    sys.meta_path.append(_TorchFLAlias())

import os as _os  # noqa: E402  (os is loaded at interpreter start already: free)


def _emulated_here():
    """Whether this process's device is an emulated chip: FL_DEVICE, else its FL_RANK_DEVICES entry.
    torch_fl._env.device_choice is the rule (and checks the value); this reads the same entry without
    importing torch_fl, which is what this hook must not do unasked."""
    value = _os.environ.get("FL_DEVICE", "").strip()
    entries = _os.environ.get("FL_RANK_DEVICES", "").strip()
    if not value and entries:
        rank, local = _os.environ.get("RANK", "").strip(), _os.environ.get("LOCAL_RANK", "").strip()
        if not (rank or local):
            return False  # a spawn launcher sets them after `import torch`: decide at the first device use
        table = {}
        for position, item in enumerate(entries.split(",")):
            key, sep, text = item.partition("=")
            key, text = (key.strip().lower(), text.strip()) if sep else (str(position), item.strip())
            table[key if key.startswith("rank") else f"local{key}"] = text
        value = table.get(f"rank{rank}") or table.get(f"local{local or rank or 0}", "")
    return value.startswith("emu:")


if _emulated_here() and \
        not any(isinstance(finder, _EmulatedPluginFirst) for finder in sys.meta_path):
    sys.meta_path.append(_EmulatedPluginFirst())
