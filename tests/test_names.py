"""The shared words of _names.py: one list each, consistent with each other and with their users."""

from __future__ import annotations

from torch_fl import _names


def test_severity_orders_exactly_the_routes():
    assert sorted(_names.ROUTE_SEVERITY) == sorted(_names.ROUTES) and len(set(_names.ROUTES)) == 5
    assert _names.ROUTE_SEVERITY[0] == "unsupported" and _names.ROUTE_SEVERITY[-1] == "native"


def test_one_answer_to_is_this_a_description_file():
    from torch_fl.description import registry
    from torch_fl.device import names_description

    assert [registry.is_path(t) for t in ("./chip.toml", "chip.toml", "vendor/chip", "npu", "emu:npu")] == \
        [True, True, True, False, False]
    assert names_description("vendor/chip") and names_description("npu") and not names_description("nope")


def test_a_route_prints_as_its_word_in_a_stats_row():
    from torch_fl._names import RouteKind

    row = {"op": "aten::tanh.default", "route": RouteKind.KERNEL}
    assert str(row) == "{'op': 'aten::tanh.default', 'route': 'kernel'}"
    assert RouteKind.KERNEL == "kernel" and f"{RouteKind.KERNEL}" == "kernel"
