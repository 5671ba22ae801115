"""Op names, one spelling everywhere in torch-fl: ``aten::name.overload``, with ``.default`` for the
unnamed overload (`canonical_op_name`). The dispatcher itself spells the unnamed overload without a suffix
(``aten::gelu``), so every call into it goes through `dispatcher_op_name`; `overloads_named` lists what a
name given by a user ('aten::gelu': every overload) covers. Base layer: every layer reads it, it reads
nothing of torch-fl.
"""

from __future__ import annotations

import re
from typing import Any

_IDENT = r"[A-Za-z_][A-Za-z0-9_]*"
_CANONICAL = re.compile(rf"({_IDENT})::({_IDENT})\.({_IDENT})")
_DEFAULT_NAMESPACE = "aten"


# Names --------------------------------------------------------------------------------------------
def canonical_op_name(op: Any) -> str:
    """Normalise an op name or ``OpOverload`` to ``ns::name.overload``.

    Accepted: ``aten::gelu``, ``aten::gelu.default``, ``aten::add.Tensor``, ``gelu``, ``add.Tensor``,
    ``aten.gelu.default`` (the ``str()`` of an ``OpOverload``), ``aten.gelu`` and the overload object.
    A name without a namespace is taken to be ``aten``.
    """
    if isinstance(op, str):
        return _canonical_from_str(op)
    schema = getattr(op, "_schema", None)
    if schema is not None:
        return _join(*_split_schema_name(schema.name), schema.overload_name or "default")
    raise TypeError(f"cannot read an op name from {type(op).__name__} {op!r}; "
                    "pass a string like 'aten::add.Tensor' or a torch.ops.aten.<op>.<overload>")


def dispatcher_op_name(canonical: str) -> str:
    """The spelling the C++ dispatcher uses: ``aten::gelu.default`` -> ``aten::gelu``."""
    return canonical.removesuffix(".default")


def _canonical_from_str(text: str) -> str:
    name = text.strip()
    if "::" in name:
        namespace, _, rest = name.partition("::")
        parts = [namespace, *rest.split(".")]
    else:
        parts = name.split(".")
        # Only a 2-part dotted name is ambiguous ('aten.gelu' vs 'add.Tensor'); an op called 'aten'
        # does not exist, so that word marks the namespace form.
        if len(parts) == 1 or (len(parts) == 2 and parts[0] != _DEFAULT_NAMESPACE):
            parts = [_DEFAULT_NAMESPACE, *parts]
    if len(parts) == 2:
        parts.append("default")
    canonical = _join(*parts) if len(parts) == 3 else ""
    if not _CANONICAL.fullmatch(canonical):
        raise ValueError(f"not an op name: {text!r}; expected a form like 'aten::add.Tensor', "
                         "'aten::gelu' or 'aten.gelu.default'")
    return canonical


def _split_schema_name(qualified: str) -> tuple[str, str]:
    namespace, _, name = qualified.partition("::")
    return namespace, name


def _join(namespace: str, name: str, overload: str) -> str:
    return f"{namespace}::{name}.{overload}"


def overloads_named(op_key: str) -> tuple[str, ...]:
    """The canonical overloads `op_key` names: itself when it names one ('aten::gelu.default'), else
    every overload of the op ('aten::gelu'), from its schemas (~20 us; the dispatcher's whole op list
    takes ~15 ms)."""
    import torch

    namespace, _, rest = op_key.partition("::")
    if "." in rest:
        return (op_key,)
    schemas = torch._C._jit_get_schemas_for_operator(op_key)
    return tuple(dict.fromkeys(f"{namespace}::{rest}.{s.overload_name or 'default'}" for s in schemas
                               if _in_dispatcher(op_key, s.overload_name)))


def _in_dispatcher(name: str, overload_name: str) -> bool:
    """Whether the dispatcher has the overload: TorchScript registers operators of its own under the aten
    namespace (aten::tanh.float, aten::tanh.Scalar) that no kernel can be registered for (issue 41)."""
    import torch

    try:
        torch._C._dispatch_find_schema_or_throw(name, overload_name)
    except RuntimeError:
        return False
    return True


__all__ = ["canonical_op_name", "dispatcher_op_name", "overloads_named"]
