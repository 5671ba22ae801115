"""torch.fl's public surface: what dir() shows, which errors users can catch, modules that import as modules."""

from __future__ import annotations

import inspect
import types

import torch

import torch_fl
from torch_fl import errors


def test_dir_shows_the_public_surface_not_the_modules_imports():
    names = dir(torch.fl)
    for private in ("sys", "torch", "importlib", "Any", "TYPE_CHECKING", "annotations"):
        assert private not in names
    assert {"device", "description", "Event", "synchronize", "distributed"} <= set(names)


def test_every_public_name_resolves():
    for name in torch_fl.__all__:
        assert getattr(torch.fl, name) is not None, name


def test_every_torch_fl_error_is_on_torch_fl():
    defined = {name for name, obj in vars(errors).items()
               if inspect.isclass(obj) and issubclass(obj, (errors.TorchFLError, Warning))}
    assert "UnsupportedOperatorError" in defined
    for name in defined:
        assert getattr(torch.fl, name) is getattr(errors, name), name
        assert name in torch_fl.__all__


def test_callable_modules_import_as_modules():
    import torch_fl.description.registry as registry
    import torch_fl.device as device

    assert isinstance(registry, types.ModuleType) and callable(registry.get)
    assert isinstance(device, types.ModuleType) and callable(device.resolve_spec)
    assert torch.fl.description is torch_fl.description and isinstance(torch.fl.description, types.ModuleType)
    assert torch.fl.description("cpu").name == "cpu"
    assert torch.fl.description().name == torch.fl.description(None).name
