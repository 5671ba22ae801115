"""Storages of the emulated device (routing/emu/storage.py): what safetensors, Hugging Face
save_pretrained/from_pretrained, torch.save/torch.load (every map_location form), torch.distributed.checkpoint
and pinned memory need, each equal to the CPU round trip."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import warnings
from pathlib import Path

import pytest
import torch

REPO = Path(__file__).parents[2]


def _tied(device):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Embedding(6, 4), torch.nn.Linear(4, 6, bias=False))
    model[1].weight = model[0].weight
    return model.to(device)


# untyped_storage(), data_ptr(), nbytes, sharing ---------------------------------------------------------
def test_storage_is_a_device_storage_over_stable_host_memory(d):
    x = torch.arange(12.0, device=d).view(3, 4)
    storage = x.untyped_storage()
    assert storage.device == d and storage.nbytes() == 48
    assert storage.data_ptr() != 0 and x.data_ptr() == storage.data_ptr()
    row = x[1]
    assert row.untyped_storage() is storage                     # a view shares its base's storage
    assert row.data_ptr() == storage.data_ptr() + row.storage_offset() * row.element_size()
    assert x.untyped_storage().data_ptr() == storage.data_ptr()  # stable while the tensor lives
    other = torch.arange(12.0, device=d)
    assert other.untyped_storage().data_ptr() != storage.data_ptr()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # (TypedStorage is deprecated)
        assert x.storage().tolist()[:3] == [0.0, 1.0, 2.0]
    assert storage.cpu().nbytes() == 48 and storage.cpu().device.type == "cpu"
    # the storage outlives its tensors, and a tensor set to it sees the values
    del x, row
    again = torch.empty(0, device=d).set_(storage, 4, (2, 2), (4, 1))
    assert again.cpu().tolist() == [[4.0, 5.0], [8.0, 9.0]]


def test_storages_made_on_the_device(d):
    made = torch.UntypedStorage(8, device=d)                   # (PyTorch alone asks PrivateUse1's allocator)
    assert made.device == d and made.nbytes() == 8
    moved = torch.arange(4, dtype=torch.int16).untyped_storage().to(device=d)
    assert moved.device == d
    assert torch.empty(0, dtype=torch.int16, device=d).set_(moved).cpu().tolist() == [0, 1, 2, 3]


# safetensors and Hugging Face ----------------------------------------------------------------------------
def test_safetensors_round_trip_equals_the_cpu(d, tmp_path):
    from safetensors.torch import _find_shared_tensors, load_file, save_file, save_model

    torch.manual_seed(0)
    tensors = {"w": torch.randn(3, 4), "i": torch.arange(5), "h": torch.randn(2, 3).half()}
    save_file({k: v.to(d) for k, v in tensors.items()}, tmp_path / "device.safetensors")
    save_file(tensors, tmp_path / "host.safetensors")
    assert (tmp_path / "device.safetensors").read_bytes() == (tmp_path / "host.safetensors").read_bytes()
    loaded = {k: v.to(d) for k, v in load_file(tmp_path / "device.safetensors").items()}
    for key, value in tensors.items():
        assert loaded[key].device == d and torch.equal(loaded[key].cpu(), value)
    # shared storage is found as on the CPU (tied weights), and save_model drops the duplicate
    model = _tied(d)
    shared = _find_shared_tensors(model.state_dict())
    assert {"0.weight", "1.weight"} in [set(s) for s in shared]
    save_model(model, tmp_path / "tied.safetensors")
    assert len(load_file(tmp_path / "tied.safetensors")) == 1


@pytest.mark.parametrize("arch", ["gpt2", "llama"])
def test_save_pretrained_from_pretrained_generate(d, tmp_path, arch):
    transformers = pytest.importorskip("transformers")
    if arch == "gpt2":
        config = transformers.GPT2Config(vocab_size=64, n_positions=32, n_embd=32, n_layer=2, n_head=2)
        cls = transformers.GPT2LMHeadModel
    else:
        config = transformers.LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                          num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=32,
                                          tie_word_embeddings=True)
        cls = transformers.LlamaForCausalLM
    torch.manual_seed(0)
    host = cls(config).eval()
    ids = torch.tensor([[1, 2, 3, 4, 5]])
    with torch.no_grad():
        expected = host(ids).logits
    expected_tokens = host.generate(ids, max_new_tokens=4, do_sample=False)
    model = host.to(d)
    model.save_pretrained(tmp_path / arch)                     # safetensors, tied weights found by storage
    again = cls.from_pretrained(tmp_path / arch).to(d).eval()
    head, embed = again.get_output_embeddings().weight, again.get_input_embeddings().weight
    assert head.device == d and head.untyped_storage().data_ptr() == embed.untyped_storage().data_ptr()
    for key, value in host.state_dict().items():                # the weights bit for bit
        assert torch.equal(again.state_dict()[key].cpu(), value.cpu()), key
    with torch.no_grad():
        torch.testing.assert_close(again(ids.to(d)).logits.cpu(), expected)
    assert torch.equal(again.generate(ids.to(d), max_new_tokens=4, do_sample=False).cpu(), expected_tokens)


# torch.save / torch.load ----------------------------------------------------------------------------------
MAP_LOCATIONS = {
    "default": (None, "emu"), "str cpu": ("cpu", "cpu"), "str device": ("emu:0", "emu"),
    "torch.device": (torch.device("emu", 0), "emu"), "dict to cpu": ({"emu:0": "cpu"}, "cpu"),
    "dict to device": ({"emu:0": "emu:0"}, "emu"), "callable (host)": (lambda storage, loc: storage, "cpu"),
    "callable (to device)": (lambda storage, loc: storage.to(device="emu:0"), "emu"),
}


@pytest.mark.parametrize("form", list(MAP_LOCATIONS))
def test_torch_load_every_map_location_keeps_values_and_sharing(d, form):
    map_location, where = MAP_LOCATIONS[form]
    model = _tied(d)
    buffer = io.BytesIO()
    torch.save(model.state_dict(), buffer)
    buffer.seek(0)
    state = torch.load(buffer, map_location=map_location)       # weights-only
    first, second = state["0.weight"], state["1.weight"]
    assert first.device.type == where
    assert torch.equal(first.cpu(), model[0].weight.detach().cpu())
    assert first.untyped_storage().data_ptr() == second.untyped_storage().data_ptr()  # still tied
    fresh = torch.nn.Sequential(torch.nn.Embedding(6, 4), torch.nn.Linear(4, 6, bias=False)).to(d)
    fresh.load_state_dict(state)
    assert torch.equal(fresh[1].weight.cpu(), model[1].weight.detach().cpu())


def test_torch_save_of_views_and_whole_modules(d):
    base = torch.arange(12.0, device=d).view(3, 4)
    buffer = io.BytesIO()
    torch.save({"base": base, "row": base[1], "col": base[:, 2]}, buffer)
    buffer.seek(0)
    back = torch.load(buffer)
    assert back["row"].untyped_storage() is back["base"].untyped_storage()
    back["base"][1, 2] = -1.0
    assert back["row"].cpu().tolist() == [4.0, 5.0, -1.0, 7.0] and back["col"].cpu().tolist() == [2.0, -1.0, 10.0]
    # a host checkpoint mapped to the device keeps its views too
    host = torch.arange(6.0).view(2, 3)
    buffer = io.BytesIO()
    torch.save({"a": host, "b": host[1]}, buffer)
    buffer.seek(0)
    mapped = torch.load(buffer, map_location="emu")
    assert mapped["a"].shape == (2, 3) and mapped["b"].shape == (3,)
    assert mapped["b"].untyped_storage() is mapped["a"].untyped_storage()
    # the module itself, with its tied Parameter objects
    model = _tied(d)
    buffer = io.BytesIO()
    torch.save(model, buffer)
    buffer.seek(0)
    again = torch.load(buffer, weights_only=False)
    assert again[0].weight is again[1].weight and isinstance(again[0].weight, torch.nn.Parameter)
    assert again[0].weight.device == d and torch.equal(again[0].weight.cpu(), model[0].weight.detach().cpu())


def test_torch_save_of_a_lazily_conjugated_tensor(d):
    z = torch.randn(3, dtype=torch.complex64)
    buffer = io.BytesIO()
    torch.save({"z": z.to(d).conj()}, buffer)
    buffer.seek(0)
    back = torch.load(buffer, map_location=lambda storage, loc: storage)
    assert torch.equal(back["z"], z.conj().resolve_conj())


def test_distributed_checkpoint_single_process(d, tmp_path):
    import torch.distributed.checkpoint as dcp

    torch.manual_seed(0)
    model = torch.nn.Linear(4, 3).to(d)
    dcp.save(model.state_dict(), checkpoint_id=tmp_path / "dcp")
    other = torch.nn.Linear(4, 3).to(d)
    state = other.state_dict()
    dcp.load(state, checkpoint_id=tmp_path / "dcp")
    other.load_state_dict(state)
    assert other.weight.device == d
    assert torch.equal(other.weight.cpu(), model.weight.detach().cpu())
    assert torch.equal(other.bias.cpu(), model.bias.detach().cpu())


# pinned memory -----------------------------------------------------------------------------------------------
def test_pin_memory_is_pinned(d):
    host = torch.arange(4.0)
    pinned = host.pin_memory()
    assert pinned.is_pinned() and pinned[1:].is_pinned() and not host.is_pinned()
    assert not pinned.clone().is_pinned() and torch.equal(pinned, host)
    assert not pinned.to(d).is_pinned()
    assert pinned.to(d, non_blocking=True).cpu().tolist() == [0.0, 1.0, 2.0, 3.0]


# a plugin-named chip, in a fresh process -------------------------------------------------------------------
NPU = """
import io, json, tempfile, torch, torch_fl
from safetensors.torch import load_file, save_file
d = torch_fl.device()
torch.manual_seed(0)
m = torch.nn.Sequential(torch.nn.Embedding(6, 4), torch.nn.Linear(4, 6, bias=False))
m[1].weight = m[0].weight
ids = torch.tensor([1, 2, 3])
expected = m(ids)                                  # (the CPU graph stays alive while the module moves)
m.to(d)
buf = io.BytesIO(); torch.save(m.state_dict(), buf); buf.seek(0)
host = torch.load(buf, map_location=lambda storage, loc: storage)
buf.seek(0); back = torch.load(buf)
path = tempfile.mkdtemp() + "/w.safetensors"
save_file({"w": m[0].weight.detach()}, path)
print(json.dumps({"device": str(d), "tied": m[0].weight is m[1].weight,
    "equal": torch.equal(m(ids.to(d)).cpu(), expected.detach()),
    "host": str(host["0.weight"].device), "back": str(back["0.weight"].device),
    "shared": back["0.weight"].untyped_storage().data_ptr() == back["1.weight"].untyped_storage().data_ptr(),
    "ptr": m[0].weight.untyped_storage().data_ptr() != 0,
    "safetensors": torch.equal(load_file(path, device="npu:0")["w"].cpu(), m[0].weight.detach().cpu()),
    "resized": list(torch.add(ids.to(d), 1, out=torch.empty(0, dtype=torch.long, device=d)).shape),
    "pinned": torch.ones(2).pin_memory().is_pinned()}))
"""


@pytest.mark.slow  # a fresh process: ~5 s
def test_storage_workflows_on_emu_npu():
    done = subprocess.run([sys.executable, "-c", NPU], capture_output=True, text=True, timeout=300,
                          env={**os.environ, "FL_DEVICE": "emu:npu"}, cwd=REPO, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert out == {"device": "npu:0", "tied": True, "equal": True, "host": "cpu", "back": "npu:0", "shared": True,
                   "ptr": True, "safetensors": True, "resized": [3], "pinned": True}


def test_set_across_host_and_device_raises_as_pytorch_does(d):
    # torch_mlu's test/storage/test_storage.py test_tensor_set_errors: every direction is a RuntimeError
    host, dev = torch.randn(2, 3), torch.randn(2, 3, device=d)
    for call in (lambda: host.set_(dev.untyped_storage()), lambda: host.set_(dev),
                 lambda: host.set_(dev.untyped_storage(), 0, dev.size(), dev.stride()),
                 lambda: dev.set_(host.untyped_storage()), lambda: dev.set_(host)):
        with pytest.raises(RuntimeError, match=r"device|cpu storage"):
            call()
    assert host.device.type == "cpu" and dev.device == d


def test_set_to_a_size_beyond_the_storage_grows_it(d):
    # torch_mlu's test/storage/test_storage.py test_tensor_set: set_(storage, 0, size) past the storage's end
    # grows it, as PyTorch's set_ grows a resizable storage on any device
    source = torch.tensor([3.0, 4.0, 9.0, 10.0], device=d)
    target = torch.tensor([], device=d)
    size = torch.Size([9, 3, 4, 10])
    target.set_(source.untyped_storage(), 0, size)
    assert target.size() == size and target.stride() == (120, 40, 10, 1) and target.device == d
    assert target.flatten()[:4].cpu().tolist() == [3.0, 4.0, 9.0, 10.0]
    target.set_(source.untyped_storage(), 0, size, (10, 360, 90, 1))
    assert target.stride() == (10, 360, 90, 1)
    assert source.cpu().tolist() == [3.0, 4.0, 9.0, 10.0]
    assert source.untyped_storage().nbytes() >= 1080 * 4
