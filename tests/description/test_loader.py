"""Description loading and validation: every class of error names file, line, key and what is allowed."""

from __future__ import annotations

import pytest

import torch_fl
from torch_fl.description import registry
from torch_fl.description.loader import load, parse
from torch_fl.description.schema import SCHEMA_VERSION
from torch_fl.errors import DescriptionError

MINIMAL = """\
schema = 1
name = "mychip"
device_type = "privateuseone"
dispatch_key = "PrivateUse1"
"""


def write(tmp_path, text, name="chip.toml"):
    path = tmp_path / name
    path.write_text(text)
    return path


def error_of(tmp_path, text) -> DescriptionError:
    with pytest.raises(DescriptionError) as info:
        load(write(tmp_path, text))
    return info.value


def test_minimal_file_gets_defaults(tmp_path):
    desc = load(write(tmp_path, MINIMAL))
    assert desc.name == "mychip"
    assert desc.section("ops")["default"] == "translate-or-error"
    assert desc.collective_backend == "gloo"
    assert desc.cache_dir().name == "mychip"


def test_unknown_top_level_key_did_you_mean(tmp_path):
    err = error_of(tmp_path, MINIMAL + 'vendr = "x"\n')
    text = str(err)
    assert "chip.toml:5" in text and "unknown key 'vendr'" in text and "Did you mean 'vendor'?" in text
    assert err.line == 5 and err.key == "vendr"


def test_unknown_section_key_names_section_and_line(tmp_path):
    err = error_of(tmp_path, MINIMAL + "\n[compile]\njit = true\ndynamic_shape = 'jit'\n")
    assert err.line == 8 and err.key == "compile.dynamic_shape"
    assert "Did you mean 'dynamic_shapes'?" in str(err)


def test_bad_enum_value_lists_allowed_values(tmp_path):
    err = error_of(tmp_path, MINIMAL + "\n[streams]\nsubmission = 'asynch'\n")
    text = str(err)
    assert "'asynch' is not allowed" in text and "async, sync" in text and "Did you mean 'async'?" in text
    assert err.line == 7


def test_wrong_type(tmp_path):
    err = error_of(tmp_path, MINIMAL + "\n[compile]\njit = 'yes'\n")
    assert "must be true or false" in str(err) and err.key == "compile.jit"


def test_bad_dtype_in_list(tmp_path):
    err = error_of(tmp_path, MINIMAL + "\n[precision]\ndtypes = ['float32', 'flaot16']\n"
                   "autocast_dtype = 'float32'\n")
    assert "'flaot16' is not allowed" in str(err) and "Did you mean 'float16'?" in str(err)


def test_bad_op_name(tmp_path):
    err = error_of(tmp_path, MINIMAL + "\n[ops]\nfallback = ['gelu']\n")
    assert "'gelu' is not an operator name" in str(err) and "aten::name" in str(err)


def test_bad_kernel_reference_and_tolerance(tmp_path):
    err = error_of(tmp_path, MINIMAL + '\n[ops.kernels]\n"aten::gelu" = "not a path"\n')
    assert "package.module:function" in str(err) and err.line == 7
    err = error_of(tmp_path, MINIMAL + "\n[precision.tolerances]\nfloat16 = { rtol = -1 }\n")
    assert "non-negative" in str(err)


def test_missing_required_key(tmp_path):
    err = error_of(tmp_path, MINIMAL.replace('dispatch_key = "PrivateUse1"\n', ""))
    assert "required key 'dispatch_key' is missing" in str(err)


def test_newer_schema_asks_for_upgrade(tmp_path):
    err = error_of(tmp_path, MINIMAL.replace("schema = 1", f"schema = {SCHEMA_VERSION + 1}"))
    assert f"schema {SCHEMA_VERSION + 1}" in str(err) and "Upgrade torch-fl" in str(err)
    assert err.line == 1


def test_invalid_toml_reports_line(tmp_path):
    err = error_of(tmp_path, MINIMAL + "[ops\n")
    assert "not valid TOML" in str(err) and err.line == 5


def test_bad_version_spec_and_autocast_outside_dtypes(tmp_path):
    err = error_of(tmp_path, MINIMAL + "\n[compat]\ntorch = 'two point one'\n")
    assert "not a version clause" in str(err) and err.key == "compat.torch"
    err = error_of(tmp_path, MINIMAL + "\n[precision]\ndtypes = ['float32']\nautocast_dtype = 'float16'\n")
    assert "not in precision.dtypes" in str(err)


@pytest.mark.parametrize("name", ["cpu", "cuda", "rocm", "mps", "xpu", "npu", "mlu", "musa"])
def test_builtin_round_trips_through_toml(name):
    desc = torch_fl.description(name)
    again = parse(desc.to_toml(), "<copy>")
    assert again == desc
    assert again.to_toml().splitlines()[1:] == desc.to_toml().splitlines()[1:]


@pytest.mark.parametrize(("name", "device_type", "key", "plugin", "env", "backend", "autocast"), [
    ("cpu", "cpu", "CPU", "", "", "gloo", "bfloat16"),
    ("cuda", "cuda", "CUDA", "", "CUDA_VISIBLE_DEVICES", "nccl", "float16"),
    ("rocm", "cuda", "CUDA", "", "HIP_VISIBLE_DEVICES", "nccl", "float16"),
    ("mps", "mps", "MPS", "", "", "gloo", "float16"),
    ("xpu", "xpu", "XPU", "", "ZE_AFFINITY_MASK", "xccl", "bfloat16"),
    ("npu", "npu", "PrivateUse1", "torch_npu", "ASCEND_RT_VISIBLE_DEVICES", "hccl", "float16"),
    ("mlu", "mlu", "PrivateUse1", "torch_mlu", "MLU_VISIBLE_DEVICES", "cncl", "float16"),
    ("musa", "musa", "PrivateUse1", "torch_musa", "MUSA_VISIBLE_DEVICES", "mccl", "float16"),
])
def test_builtin_identity(name, device_type, key, plugin, env, backend, autocast):
    desc = registry.get(name)
    assert (desc.device_type, desc.dispatch_key, desc.plugin, desc.visible_devices_env,
            desc.collective_backend, desc.autocast_dtype) == (device_type, key, plugin, env, backend, autocast)


# Values, not only types (issue 31): each error names the file, the line, the key and what is allowed.
def test_dispatch_key_must_be_a_backend_key_of_torch(tmp_path):
    err = error_of(tmp_path, MINIMAL.replace('"PrivateUse1"', '"Nonsense"'))
    text = str(err)
    assert err.line == 4 and err.key == "dispatch_key" and "chip.toml:4" in text
    assert "'Nonsense' is not a backend dispatch key of torch" in text
    assert "allowed values: CPU, CUDA, HIP" in text and "PrivateUse1" in text
    err = error_of(tmp_path, MINIMAL.replace('"PrivateUse1"', '"PrivatUse1"'))
    assert "Did you mean 'PrivateUse1'?" in str(err)


def test_dispatch_key_check_needs_no_torch(monkeypatch):
    import sys

    from torch_fl.description import schema

    monkeypatch.setitem(sys.modules, "torch", None)  # as where torch is not importable
    assert schema.backend_dispatch_keys() == schema.BACKEND_DISPATCH_KEYS
    assert parse(MINIMAL).dispatch_key == "PrivateUse1"
    with pytest.raises(DescriptionError, match="'Nonsense' is not a backend dispatch key"):
        parse(MINIMAL.replace('"PrivateUse1"', '"Nonsense"'))


def test_the_built_in_key_list_is_torchs():
    import torch

    from torch_fl.description.schema import BACKEND_DISPATCH_KEYS

    members = list(torch._C.DispatchKey.__members__)
    dense = members[members.index("StartOfDenseBackends") + 1:members.index("EndOfDenseBackends")]
    assert set(BACKEND_DISPATCH_KEYS) == set(dense)


def test_device_type_must_be_an_identifier(tmp_path):
    err = error_of(tmp_path, MINIMAL.replace('"privateuseone"', '"aten::gelu"'))
    assert err.line == 3 and err.key == "device_type"
    assert "'aten::gelu' is not a torch device type: lowercase letters, digits and '_'" in str(err)
    for bad in ("NPU", "1chip", "npu:0", "npu\\n"):
        assert "is not a torch device type" in str(error_of(tmp_path, MINIMAL.replace('"privateuseone"',
                                                                                      f'"{bad}"')))


def test_visible_devices_env_must_be_a_posix_name(tmp_path):
    err = error_of(tmp_path, MINIMAL + 'visible_devices_env = "os; rm -rf /"\n')
    assert err.line == 5 and err.key == "visible_devices_env"
    assert "'os; rm -rf /' is not a POSIX environment variable name" in str(err)
    assert load(write(tmp_path, MINIMAL + 'visible_devices_env = "MY_CHIP_VISIBLE_DEVICES"\n')).visible_devices_env
    assert load(write(tmp_path, MINIMAL + 'visible_devices_env = ""\n')).visible_devices_env == ""


def test_plugin_and_detect_module_must_be_module_names(tmp_path):
    err = error_of(tmp_path, MINIMAL + 'plugin = "torch_npu; import os"\n')
    assert err.key == "plugin" and "is not a Python module name" in str(err)
    err = error_of(tmp_path, MINIMAL + '\n[detect]\nmodule = "torch..npu"\n')
    assert err.key == "detect.module" and err.line == 7


def test_a_vendor_collective_library_of_its_own_is_accepted_by_its_form(tmp_path):
    # issue 43: a chip whose collective library is not in torch-fl's list could not be described
    desc = load(write(tmp_path, MINIMAL + '\n[collectives]\nbackend = "fccl"\n'))
    assert desc.collective_backend == "fccl"
    for bad in ("FCCL", "f ccl", "nccl;gloo", "1ccl"):
        err = error_of(tmp_path, MINIMAL + f'\n[collectives]\nbackend = "{bad}"\n')
        assert err.key == "collectives.backend" and err.line == 7
        assert f"'{bad}' is not a torch.distributed backend name" in str(err)


@pytest.mark.parametrize("value", [2**63, 1001, -1001])
def test_priority_is_bounded(tmp_path, value):
    err = error_of(tmp_path, MINIMAL + f"\n[detect]\npriority = {value}\n")
    assert err.line == 7 and err.key == "detect.priority"
    assert "is out of range: allowed values are integers from -1000 to 1000" in str(err)
    assert load(write(tmp_path, MINIMAL + "\n[detect]\npriority = -1000\n")).section("detect")["priority"] == -1000


def test_ops_that_do_not_exist_are_refused_at_load(tmp_path):
    err = error_of(tmp_path, MINIMAL + "\n[ops]\nfallback = ['aten::gelu', 'aten::gleu']\n")
    assert err.line == 7 and err.key == "ops.fallback"
    assert "'aten::gleu' is not an aten operator of this torch." in str(err) and "Did you mean" in str(err)
    err = error_of(tmp_path, MINIMAL + "\n[ops]\nunsupported = ['aten::gelu.Tensorr']\n")
    assert "'aten::gelu.Tensorr' is not an overload of aten::gelu; allowed overloads: default, out" in str(err)
    err = error_of(tmp_path, MINIMAL + '\n[ops.dtypes]\n"aten::softmx" = ["float32"]\n')
    assert err.line == 7 and err.key == "ops.dtypes.aten::softmx" and "Did you mean 'aten::softmax'?" in str(err)
    err = error_of(tmp_path, MINIMAL + '\n[precision.op_tolerances]\n"aten::bmmm" = { rtol = 1e-3 }\n')
    assert err.key == "precision.op_tolerances.aten::bmmm"
    # real names, every overload, the default one, and a custom namespace (registered at its import) load
    ok = MINIMAL + "\n[ops]\ntranslate = ['aten::gelu', 'aten::add.Tensor', 'aten::mm.default', 'mylib::fused']\n"
    assert load(write(tmp_path, ok)).section("ops")["translate"][-1] == "mylib::fused"


def test_a_copy_of_a_builtin_loads_back():
    # the built-ins name vendor ops of other torch versions (tables/npu.txt's aten::cross_entropy): a copy
    # keeps them
    for name in ("npu", "npu-910", "npu-310p", "mlu", "cuda"):
        desc = registry.get(name)
        assert parse(desc.to_toml(), f"<copy of {name}>") == desc
