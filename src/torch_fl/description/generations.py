"""The generations of a chip (npu, npu-a3, npu-910, npu-310p: descriptions that extend one another) and
the fixes that name them: which generation holds a dtype this one lacks, why an op is not native in a
dtype here and which generation takes it. Above the registry (it reads every discovered description), so
that the description model stays below it."""

from __future__ import annotations

from .model import Description
from .registry import descriptions

__all__ = ["dtype_refusal", "generations", "with_more_dtypes"]


def generations(desc: Description) -> list[Description]:
    """The generations of this chip: the discovered descriptions that extend, directly or through
    others, the same description as this one (itself included; npu, npu-a3, npu-910, npu-310p), in
    descending detect.priority. Just this one when nothing extends it and it extends nothing."""
    known = descriptions()

    def root(one: Description) -> str:
        seen = {one.name}
        while one.data["extends"] in known and one.data["extends"] not in seen:
            one = known[one.data["extends"]]
            seen.add(one.name)
        return one.data["extends"] if one.data["extends"] in seen else one.name

    mine = root(desc)
    family = [d for d in known.values() if d.name != desc.name and root(d) == mine]
    return sorted([desc, *family], key=lambda d: (-d.section("detect")["priority"], d.name))


def with_more_dtypes(desc: Description) -> str:
    """A fix naming the other generations of this chip that hold dtypes this one lacks (npu-910 has no
    bfloat16, npu and npu-a3 have it) and how to select one; '' when there are none."""
    mine = set(desc.dtypes)
    others = [(d, [t for t in d.dtypes if t not in mine]) for d in generations(desc) if d.name != desc.name]
    others = [(d, missing) for d, missing in others if missing]
    if not others:
        return ""
    what = ", ".join(sorted({t for _, missing in others for t in missing}))
    on = f" ({desc.generation})" if desc.generation else ""
    named = ", ".join(f"'{d.name}'" + (f" ({d.generation})" if d.generation else "") for d, _ in others)
    first = others[0][0].name
    return (f"'{desc.name}'{on} has no {what}; {named} {'have' if len(others) > 1 else 'has'} it: for that "
            f"hardware use FL_DEVICE=emu:{first} to emulate it (FL_BACKEND={first} or --device {first} on "
            f"the chip)")


def dtype_refusal(desc: Description, op: str, dtype: str) -> str:
    """Why `op` is not native in `dtype` here although it is native (the dtype is the reason), with
    the generations of this chip that take it and how to select one; '' when the dtype is no reason."""
    bare = op.rsplit(".", 1)[0] if op.endswith(".default") else op
    on = f" on {desc.generation}" if desc.generation else ""
    if dtype not in desc.dtypes:
        why = f"precision.dtypes has no {dtype}{on}"
    else:
        limits = desc.op_dtypes()
        found = limits.get(op)
        found = found if found is not None else limits.get(op.rsplit(".", 1)[0])
        if found is None or dtype in found:
            return ""
        why = f"ops.dtypes: {bare} takes {', '.join(sorted(found))}{on}"
    others = [d for d in generations(desc) if d.name != desc.name and d.takes(op, dtype)]
    if others:
        named = ", ".join(f"'{d.name}'" + (f" ({d.generation})" if d.generation else "") for d in others)
        first = others[0].name
        why += (f"; {named} {'take' if len(others) > 1 else 'takes'} it: for that hardware use --device "
                f"{first} (FL_BACKEND={first}; FL_DEVICE=emu:{first} emulates it)")
    here = [d for d in ("float32", "float16") if d != dtype and desc.takes(op, d)]
    if here:
        why += f"; here compute in {' or '.join(here)}"
    return why
