"""torch.fl.compile: the description's backend and dynamic-shape policy, stats, and the cache."""

from __future__ import annotations

import logging
import os

import pytest
import torch

import torch_fl
from torch_fl.compiler import cache


def _mlp() -> torch.nn.Module:
    return torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2))


def test_jit_false_returns_the_same_object_and_logs_once(use_description, caplog):
    use_description('jit = false\nbackend = "eager"')
    model = _mlp()
    with caplog.at_level(logging.WARNING, logger="torch_fl.compile"):
        assert torch.fl.compile(model) is model
        assert torch.fl.compile(model) is model
    assert len([r for r in caplog.records if "compile.jit = false" in r.getMessage()]) == 1
    with pytest.raises(ValueError, match=r"not returned by torch\.fl\.compile"):
        torch.fl.compile_stats(model)


def test_static_policy_counts_a_recompilation_per_new_shape(use_description):
    use_description('backend = "eager"\ndynamic_shapes = "static"')
    compiled = torch.fl.compile(_mlp())
    stats = torch.fl.compile_stats(compiled)
    assert (stats.backend, stats.policy, stats.dynamic) == ("eager", "static", False)
    compiled(torch.randn(2, 4))
    assert (stats.compilations, stats.recompilations) == (1, 0)
    compiled(torch.randn(3, 4))
    compiled(torch.randn(2, 4))  # seen before: no compilation
    assert (stats.compilations, stats.recompilations) == (2, 1)
    compiled(torch.randn(5, 4))
    assert stats.recompilations == 2 and stats.shapes == ["2x4", "3x4", "5x4"]
    assert stats.dynamic_graphs == 0


def test_jit_policy_compiles_a_dynamic_graph_on_the_second_shape(use_description):
    use_description('backend = "eager"\ndynamic_shapes = "jit"')
    compiled = torch.fl.compile(_mlp())
    stats = torch.fl.compile_stats(compiled)
    for batch in (2, 3, 5, 7):
        compiled(torch.randn(batch, 4))
    assert stats.dynamic is None and stats.compilations == 2 and stats.dynamic_graphs == 1


def test_dynamic_policy_is_dynamic_from_the_start_and_kwargs_override(use_description):
    use_description('backend = "eager"\ndynamic_shapes = "dynamic"')
    compiled = torch.fl.compile(_mlp())
    compiled(torch.randn(2, 4))
    assert torch.fl.compile_stats(compiled).dynamic_graphs == 1
    static = torch.fl.compile(_mlp(), dynamic=False, backend="aot_eager")
    static(torch.randn(2, 4))
    stats = torch.fl.compile_stats(static)
    assert (stats.dynamic, stats.backend, stats.dynamic_graphs) == (False, "aot_eager", 0)


def test_models_of_one_class_do_not_count_as_each_others_recompilations(use_description):
    use_description('backend = "eager"\ndynamic_shapes = "static"')
    first, second = torch.fl.compile(_mlp()), torch.fl.compile(_mlp())
    first(torch.randn(2, 4))
    second(torch.randn(2, 4))
    assert torch.fl.compile_stats(second).recompilations == 0


def test_compiling_points_inductor_and_triton_into_the_entry(use_description, compile_cache):
    use_description('backend = "eager"')
    torch.fl.compile(_mlp())
    entry = cache.open_entry(torch_fl.description("cpu"))
    assert os.environ["TORCHINDUCTOR_CACHE_DIR"] == str(entry.inductor_dir)
    assert os.environ["TRITON_CACHE_DIR"] == str(entry.triton_dir)
    assert entry.path.parent == compile_cache


def test_decorator_form(use_description):
    use_description('backend = "eager"')

    @torch.fl.compile
    def double(x):
        return x * 2

    assert torch.equal(double(torch.ones(3)), torch.full((3,), 2.0))
    assert torch.fl.compile_stats(double).compilations == 1


@pytest.mark.slow
def test_inductor_hits_the_cache_in_a_fresh_process(tiny_model, compile_cache, spawn):
    """Real Inductor compiles: a cold process misses and fills the entry, the next process hits it."""
    results = []
    for _ in range(2):
        proc = spawn("warmup", tiny_model, "--shapes", "2x4")
        out, err = proc.communicate(timeout=600)
        assert proc.returncode == 0, err
        results.append(out)
    assert "miss" in results[0].split("2x4", 2)[-1].splitlines()[0]
    assert results[1].split("2x4", 2)[-1].splitlines()[0].rstrip().endswith("hit")
    (entry,) = [p for p in compile_cache.iterdir() if p.name.startswith("cpu-")]
    assert list((entry / "inductor" / "fxgraph").rglob("*")), "Inductor's FX graph cache is in the entry"
    assert list((compile_cache / cache.HEADERS).glob("*.gch")), "its precompiled header is in the root"
    assert [(s.name, s.status) for s in cache.scan(compile_cache, full=True)] == [
        (cache.HEADERS, "shared"), (entry.name, "ok")]
