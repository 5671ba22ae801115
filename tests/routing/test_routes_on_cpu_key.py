"""Every route on the CPU key, with real dispatcher registration; precedence; strict mode; error text;
deactivation restoring native behaviour."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import warnings

import pytest
import torch

import torch_fl
from torch_fl.errors import ConfigError, FallbackWarning, UnsupportedOperatorError
from torch_fl.routing import route_table
from torch_fl.routing.install import GET_KERNEL_SINCE, supports_key_routing

aten = torch.ops.aten
# Routing an op that has a CPU kernel (forced routes, dtype conditions) keeps that kernel with
# torch.library.get_kernel; older torch can only route ops without a kernel on the key.
needs_get_kernel = pytest.mark.skipif(not supports_key_routing(),
                                      reason=f"needs torch >= {GET_KERNEL_SINCE} (torch.library.get_kernel)")


def activate_with(monkeypatch, **env):
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    torch_fl.reset()
    torch_fl.reset_route_stats()
    return torch_fl.activate()


def calls(op, route=None):
    return sum(r["calls"] for r in torch_fl.route_stats() if r["op"] == op and route in (None, r["route"]))


def test_native_ops_are_never_intercepted():
    torch_fl.reset_route_stats()
    activation = torch_fl.activate()
    assert activation.description.name == "cpu"
    installed = set(activation.installation.ops)
    assert "aten::mm.default" not in installed and "aten::gelu.default" not in installed
    # only ops the CPU has no kernel for get a router
    assert "aten::_cudnn_rnn.default" in installed
    x = torch.randn(8, 8)
    _ = x @ x
    assert torch_fl.route_stats() == []


@needs_get_kernel
def test_translate_on_the_cpu_key(monkeypatch):
    activate_with(monkeypatch, FL_ROUTE="aten::gelu=translate")
    x = torch.randn(64, requires_grad=True)
    y = torch.nn.functional.gelu(x)
    torch_fl.deactivate()
    assert calls("aten::gelu.default", "translate") == 1
    torch.testing.assert_close(y, torch.nn.functional.gelu(x))
    y.sum().backward()  # routing sits below autograd: the backward op is gelu_backward
    assert x.grad is not None


@needs_get_kernel
def test_fallback_on_the_cpu_key_warns_once_and_counts(monkeypatch):
    activate_with(monkeypatch, FL_ROUTE="aten::mm.default=fallback")
    a, b = torch.randn(4, 5), torch.randn(5, 3)
    with pytest.warns(FallbackWarning, match=r"aten::mm.default \[float32\] runs on the CPU") as record:
        for _ in range(3):
            out = a @ b
    assert len([w for w in record if issubclass(w.category, FallbackWarning)]) == 1
    assert calls("aten::mm.default", "fallback") == 3
    torch_fl.deactivate()
    torch.testing.assert_close(out, a @ b)


@needs_get_kernel
def test_strict_mode_turns_fallback_into_an_error(monkeypatch):
    activate_with(monkeypatch, FL_ROUTE="aten::mm=fallback", FL_FALLBACK="error")
    with pytest.raises(UnsupportedOperatorError, match="FL_FALLBACK=error forbids"):
        torch.randn(2, 2) @ torch.randn(2, 2)


@needs_get_kernel
def test_unsupported_error_text(monkeypatch):
    activate_with(monkeypatch, FL_ROUTE="aten::bmm=unsupported")
    with pytest.raises(UnsupportedOperatorError) as info:
        torch.bmm(torch.randn(2, 3, 4), torch.randn(2, 4, 5))
    text = str(info.value)
    assert isinstance(info.value, NotImplementedError)
    assert "aten::bmm.default is not supported on cpu (description 'cpu')" in text
    assert "Tensor[float32, (2, 3, 4), cpu], Tensor[float32, (2, 4, 5), cpu]" in text
    assert "decided by FL_ROUTE" in text
    assert "FL_ROUTE='aten::bmm.default=fallback'" in text
    assert "[routes] \"aten::bmm.default\" = \"fallback\"" in text and "torch.fl.register_kernel('aten::bmm.default'" in text
    assert "builtin" not in text.split("fixes:")[1]  # never a file inside the installed package


@needs_get_kernel
def test_kernel_route_and_handle_removal():
    torch_fl.activate()
    seen = []

    def my_gelu(x, approximate="none"):
        seen.append(x.shape)
        return x * 0 + 42

    handle = torch_fl.register_kernel("aten::gelu", my_gelu, dtypes=[torch.float16])
    x32, x16 = torch.randn(4), torch.randn(4).half()
    assert torch.nn.functional.gelu(x16).eq(42).all()
    assert not torch.nn.functional.gelu(x32).eq(42).any()   # float32 stays native
    assert seen == [torch.Size([4])]
    assert calls("aten::gelu.default", "kernel") == 1
    handle.remove()
    assert not torch.nn.functional.gelu(x16).eq(42).any()


@needs_get_kernel
def test_a_kernel_handle_installs_and_removes_its_op_alone():
    """register_kernel re-installs the routers of that op only (per-op handles): the key's backend
    fallback and every other op's router stay as they were, and the table keeps its other decisions."""
    active = torch_fl.activate()
    installation = active.installation
    fallback, others = installation.fallback, dict(installation.libraries)
    routed_before = set(installation.ops)
    table = route_table()
    bmm = table.route("aten::bmm.default", "float32")
    handle = torch_fl.register_kernel("aten::gelu.default", lambda x, approximate="none": x * 0 + 7,
                                      dtypes=["float16"])
    try:
        assert torch_fl.routing.active() is active, "the activation itself was not replaced"
        assert installation.fallback is fallback and all(installation.libraries[op] is lib
                                                          for op, lib in others.items())
        assert set(installation.ops) == routed_before | {"aten::gelu.default"}
        assert "aten::gelu.default" in installation.libraries
        assert route_table() is table and table.route("aten::bmm.default", "float32") is bmm
        assert torch.nn.functional.gelu(torch.ones(3).half()).eq(7).all()
        assert not torch.nn.functional.gelu(torch.ones(3)).eq(7).any()
    finally:
        handle.remove()
    assert set(installation.ops) == routed_before and "aten::gelu.default" not in installation.libraries
    assert not torch.nn.functional.gelu(torch.ones(3).half()).eq(7).any()
    assert installation.fallback is fallback


def test_a_bare_op_name_covers_its_dispatcher_overloads_only():
    """TorchScript registers aten::tanh.float / .Scalar beside the dispatcher's overloads; a kernel for the
    bare name 'aten::tanh', registered while routing is active, used to stop at 'operator aten::tanh.float
    does not exist' (issue 41)."""
    torch_fl.activate()
    torch.tanh(torch.ones(2))
    handle = torch_fl.register_kernel("aten::tanh", lambda x: x * 0 + 3, device_type="cpu")
    try:
        assert torch.tanh(torch.ones(2)).eq(3).all()
        assert calls("aten::tanh.default", "kernel") == 1
    finally:
        handle.remove()
    assert torch.tanh(torch.zeros(2)).eq(0).all()


def test_kernel_for_another_device_type_is_ignored():
    torch_fl.activate()
    handle = torch_fl.register_kernel("aten::gelu", lambda x, approximate="none": x * 0, device_type="npu")
    try:
        assert route_table().route("aten::gelu.default", "float32").kind == "native"
    finally:
        handle.remove()


@needs_get_kernel
def test_dtype_conditioned_route(monkeypatch, tmp_path):
    desc = tmp_path / "limited.toml"
    desc.write_text('schema = 1\nname = "cpu-limited"\ndevice_type = "cpu"\ndispatch_key = "CPU"\n'
                    '[detect]\npriority = -1\n[ops.dtypes]\n"aten::addmm" = ["float32"]\n')
    activate_with(monkeypatch, FL_DESCRIPTION=str(desc), FL_BACKEND="cpu-limited")
    table = route_table()
    assert table.route("aten::addmm.default", "float32").kind == "native"
    assert table.route("aten::addmm.default", "float64").kind == "translate"
    b, m1, m2 = torch.randn(3, 3, dtype=torch.float64), torch.randn(3, 2, dtype=torch.float64), \
        torch.randn(2, 3, dtype=torch.float64)
    out64 = torch.addmm(b, m1, m2)
    out32 = torch.addmm(b.float(), m1.float(), m2.float())
    torch_fl.deactivate()
    assert calls("aten::addmm.default", "translate") == 1 and calls("aten::addmm.default") == 1
    torch.testing.assert_close(out64, torch.addmm(b, m1, m2))
    torch.testing.assert_close(out32, torch.addmm(b.float(), m1.float(), m2.float()))


@needs_get_kernel
def test_precedence_env_over_config_over_description(monkeypatch, tmp_path):
    desc = tmp_path / "d.toml"
    desc.write_text('schema = 1\nname = "cpu-lists"\ndevice_type = "cpu"\ndispatch_key = "CPU"\n'
                    '[detect]\npriority = -1\n[ops]\nunsupported = ["aten::gelu", "aten::relu", "aten::tanh"]\n')
    (tmp_path / "torch_fl.toml").write_text('[routes]\n"aten::gelu" = "fallback"\n"aten::relu" = "fallback"\n')
    monkeypatch.chdir(tmp_path)
    activate_with(monkeypatch, FL_DESCRIPTION=str(desc), FL_BACKEND="cpu-lists",
                  FL_ROUTE="aten::gelu.default=translate")
    table = route_table()
    gelu, relu, tanh = (table.route(f"aten::{n}.default", "float32") for n in ("gelu", "relu", "tanh"))
    assert (gelu.kind, gelu.source) == ("translate", "FL_ROUTE")
    assert relu.kind == "fallback" and "torch_fl.toml [routes]" in relu.source
    assert tanh.kind == "unsupported" and "ops.unsupported" in tanh.source
    # an exact overload beats the bare name, and the bare name covers every overload
    assert table.route("aten::gelu.out", "float32").kind == "fallback"


def test_bad_fl_route(monkeypatch):
    monkeypatch.setenv("FL_ROUTE", "aten::gelu=transalte")
    torch_fl.reset()
    with pytest.raises(ConfigError, match="Did you mean 'translate'"):
        route_table("cpu")


@needs_get_kernel
def test_deactivate_restores_the_dispatcher(monkeypatch):
    cpu = torch._C.DispatchKey.CPU

    def state():
        return ({op: torch._C._dispatch_has_kernel_for_dispatch_key(op, "CPU")
                 for op in ("aten::_cudnn_rnn", "aten::gelu", "aten::mm")},
                torch._C._dispatch_has_backend_fallback(cpu))

    before = state()
    activate_with(monkeypatch, FL_ROUTE="aten::gelu=unsupported")
    # gelu has a CPU kernel: a per-op router; ops without one share a single backend fallback
    assert torch._C._dispatch_has_kernel_for_dispatch_key("aten::gelu", "CPU")
    assert torch._C._dispatch_has_backend_fallback(cpu)
    with pytest.raises(UnsupportedOperatorError):
        torch.nn.functional.gelu(torch.randn(3))
    torch_fl.deactivate()
    assert state() == before
    torch.nn.functional.gelu(torch.randn(3))


@pytest.mark.skipif(not hasattr(torch.library.Library, "fallback"), reason="torch without Library.fallback")
def test_kernelless_ops_route_through_the_backend_fallback():
    activation = torch_fl.activate()
    assert "aten::_cudnn_rnn.default" in activation.installation.kernelless
    x = torch.randn(4)
    # no CPU kernel and no decomposition: the router's error, not PyTorch's "Could not run"
    with pytest.raises(UnsupportedOperatorError, match=r"aten::_cudnn_rnn_flatten_weight\.default"):
        torch.ops.aten._cudnn_rnn_flatten_weight.default([x], 4, 16, 1, 16, 0, 1, False, False)


def test_activation_is_idempotent_and_thread_safe():
    import threading

    results = []
    threads = [threading.Thread(target=lambda: results.append(torch_fl.activate())) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len({id(r) for r in results}) == 1
    assert len(torch_fl.routing.activation.stack) == 1


@needs_get_kernel
def test_activated_context_manager_undoes_only_its_own(monkeypatch):
    monkeypatch.setenv("FL_ROUTE", "aten::gelu=unsupported")
    torch_fl.reset()
    with torch_fl.activated(), pytest.raises(UnsupportedOperatorError):
        torch.nn.functional.gelu(torch.randn(3))
    torch.nn.functional.gelu(torch.randn(3))


def test_first_device_resolution_activates():
    assert torch_fl.routing.active() is None
    torch_fl.device()
    assert torch_fl.routing.active() is not None


@pytest.mark.slow
@needs_get_kernel
def test_route_log_written_at_exit(tmp_path):
    log = tmp_path / "routes.json"
    code = ("import torch, torch_fl; torch_fl.device(); "
            "[torch.nn.functional.gelu(torch.randn(4)) for _ in range(5)]")
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("FL_")},
           "FL_ROUTE": "aten::gelu=translate", "FL_ROUTE_LOG": str(log)}
    subprocess.run([sys.executable, "-c", code], env=env, check=True)
    data = json.loads(log.read_text())
    assert data["device"] == "cpu" and data["description"] == "cpu"
    [gelu] = [r for r in data["records"] if r["op"] == "aten::gelu.default"]
    assert (gelu["dtype"], gelu["route"], gelu["calls"]) == ("float32", "translate", 5)
    assert gelu["seconds"] > 0


@needs_get_kernel
def test_dispatch_logger_records_each_decision_once(monkeypatch):
    import logging

    class Collect(logging.Handler):
        def __init__(self):
            super().__init__()
            self.messages = []

        def emit(self, record):
            self.messages.append(record.getMessage())

    collect = Collect()
    logger = logging.getLogger("torch_fl.dispatch")
    logger.addHandler(collect)
    logger.setLevel(logging.DEBUG)
    try:
        activate_with(monkeypatch, FL_ROUTE="aten::gelu=translate")
        for _ in range(3):
            torch.nn.functional.gelu(torch.randn(4))
    finally:
        logger.removeHandler(collect)
        logger.setLevel(logging.NOTSET)
    decisions = [m for m in collect.messages if "aten::gelu.default" in m]
    assert decisions == ["aten::gelu.default [float32] -> translate (FL_ROUTE)"]


def test_no_warning_for_native_runs():
    torch_fl.activate()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        torch.randn(3, 3) @ torch.randn(3, 3)


@pytest.mark.skipif(supports_key_routing(), reason="checks the message on torch without get_kernel")
def test_old_torch_names_the_version_it_needs(monkeypatch):
    monkeypatch.setenv("FL_ROUTE", "aten::gelu=translate")
    torch_fl.reset()
    with pytest.raises(torch_fl.errors.TorchVersionError, match=f"needs torch >= {GET_KERNEL_SINCE}"):
        torch_fl.activate()


@needs_get_kernel
def test_a_kernel_may_call_its_own_op():
    torch_fl.activate()
    handle = torch_fl.register_kernel(
        "aten::gelu", lambda x, approximate="none": torch.ops.aten.gelu.default(x, approximate=approximate) * 2)
    try:
        x = torch.randn(5)
        wrapped = torch.nn.functional.gelu(x)
    finally:
        handle.remove()
    torch.testing.assert_close(wrapped, 2 * torch.nn.functional.gelu(x))


def test_route_table_of_a_device_id_does_not_activate():
    assert torch_fl.route_table("acc0").description.name == "cpu"
    assert torch_fl.route_table("cuda:0").description.name == "cuda"
    assert torch_fl.routing.active() is None
    with pytest.raises(LookupError, match="Did you mean 'cuda'"):
        torch_fl.route_table("cdua")
