"""`torchfl grade`: honest levels from measurements, never from what was not measured."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from test_html import _run_chromium, console_errors

from torch_fl.analysis import grade as grade_module
from torch_fl.analysis.bench import alignment_interval
from torch_fl.analysis.grade import (
    FAIL,
    INCONCLUSIVE,
    LEVELS,
    NOT_MEASURED,
    PASS,
    STATUSES,
    achieved_level,
    claim_check,
    criteria,
    decide,
    grade,
    halved_inputs,
)
from torch_fl.analysis.model import load_model
from torch_fl.cli import main
from torch_fl.report import render_text

EXAMPLES = Path(__file__).parents[2] / "examples"

# The shipped examples at small sizes, so that a grade (with bench) takes a second or two.
MODELS = f'''
import sys
import torch

sys.path.insert(0, {str(EXAMPLES)!r})
import cnn, gpt, unusual


def gpt_small():
    torch.manual_seed(0)
    model = gpt.GPT(vocab=64, dim=32, heads=2, layers=1, context=16)
    return model, (torch.randint(0, 64, (2, 16)),), gpt.lm_loss


def cnn_small():
    return cnn.factory(batch=4, size=8)


def unusual_small():
    return unusual.factory(batch=8)


class Tiny(torch.nn.Module):
    # Not a Sequential: a compiled module without __len__ has no truth value, which grade must not need.
    def __init__(self):
        super().__init__()
        self.a, self.b = torch.nn.Linear(8, 8), torch.nn.Linear(8, 2)

    def forward(self, x):
        return self.b(torch.relu(self.a(x)))


def tiny():
    torch.manual_seed(0)
    return Tiny(), (torch.randn(4, 8),)


class Scale(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.w = torch.nn.Parameter(torch.ones(3))

    def forward(self, x, k):
        return self.w * x * k


def scalar_input():
    return Scale(), (torch.randn(3), torch.tensor(2.0))
'''

TOP_KEYS = {"model", "device", "reference", "description", "claimed_level", "level", "level_reason",
            "claim_confirmed", "criteria", "thresholds", "measurements"}
CRITERION_KEYS = {"id", "level", "name", "threshold", "measured", "status", "measurement", "evidence"}
IDS = ["l0.train_step", "l0.unsupported_ops", "l1.native_share", "l1.alignment", "l1.autocast",
       "l1.precision", "l2.distributed", "l2.scaling", "l2.dynamic_shapes", "l2.compile", "l2.memory"]
RUNS_ON_DEVICE = ("l1.alignment", "l1.autocast", "l1.precision", "l2.dynamic_shapes", "l2.memory")


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    path = tmp_path_factory.mktemp("models") / "models.py"
    path.write_text(MODELS)
    return path


def _grade_cli(models: Path, factory: str, device: str, tmp_path: Path, *extra: str,
               preflight: bool = False) -> dict:
    """grade through the CLI; the preflight (two spawned interpreters, seconds) only where asked."""
    out = tmp_path / "grade.json"
    assert main(["grade", f"{models}:{factory}", "--device", device, "--steps", "4", "--warmup", "1",
                 "--json", str(out), *([] if preflight else ["--no-preflight"]), *extra]) == 0
    return json.loads(out.read_text())


def _by_id(data: dict) -> dict[str, dict]:
    return {c["id"]: c for c in data["criteria"]}


def _recomputed_level(data: dict) -> str:
    """The level from the criteria alone: the highest whose criteria and those below all PASS."""
    level = "none"
    for name in LEVELS:
        if any(c["status"] != PASS for c in data["criteria"] if c["level"] == name):
            break
        level = name
    return level


def _check_common(data: dict) -> None:
    assert set(data) == TOP_KEYS
    assert [c["id"] for c in data["criteria"]] == IDS
    for c in data["criteria"]:
        assert set(c) == CRITERION_KEYS
        assert c["status"] in STATUSES and c["evidence"] and c["threshold"]
        # Only a measurement has a value: NOT MEASURED carries none.
        assert (c["measured"] is None) == (c["status"] == NOT_MEASURED), c
    assert data["level"] == _recomputed_level(data)
    # grade never times a multi-device training run, so L2 is never claimed.
    rows = _by_id(data)
    assert rows["l2.scaling"]["status"] == NOT_MEASURED
    assert data["level"] != "L2"
    assert {"native_calls_share", "alignment", "scaling", "precision", "memory", "source"} <= set(
        data["thresholds"])
    assert data["thresholds"]["native_calls_share"] == 0.8 and data["thresholds"]["alignment"] == 0.9
    assert data["thresholds"]["scaling"] == {"devices": 4, "speedup": 3.2}


def _check_alignment(row: dict, bench: dict) -> None:
    # Bench on a shared 2-core machine is noisy: the status follows the interval, whatever it is.
    assert isinstance(row["measured"], float) and row["measured"] == bench["alignment"]
    interval = bench["alignment_interval"]
    if bench["load"]["loaded"]:  # load decided the step times: no verdict whatever the interval
        assert row["status"] == INCONCLUSIVE and "load made it unmeasurable" in row["evidence"], row
        return
    assert row["status"] == decide(interval["low"], interval["high"], 0.9)
    if row["status"] == INCONCLUSIVE:
        assert "Settle it with `torchfl grade " in row["evidence"] and "--steps " in row["evidence"]


# ----------------------------------------------------------------------------------------- the examples

@pytest.mark.slow
def test_gpt_on_cpu(models, tmp_path):
    data = _grade_cli(models, "gpt_small", "cpu", tmp_path, preflight=True)
    _check_common(data)
    rows = _by_id(data)
    for key in ("l0.train_step", "l0.unsupported_ops", "l1.native_share", "l1.autocast", "l1.precision",
                "l2.dynamic_shapes", "l2.memory"):
        assert rows[key]["status"] == PASS, rows[key]
    _check_alignment(rows["l1.alignment"], data["measurements"]["bench"])
    assert rows["l1.native_share"]["measured"] == 1.0
    assert rows["l1.precision"]["measured"] == 0
    assert "bfloat16" in rows["l1.autocast"]["evidence"]
    assert "--compile" in rows["l2.compile"]["evidence"] and rows["l2.compile"]["status"] == NOT_MEASURED
    distributed = rows["l2.distributed"]  # a real two-rank preflight through torch.fl.distributed, gloo
    assert distributed["status"] == PASS, distributed
    assert "2 ranks" in distributed["evidence"] and "gloo" in distributed["evidence"]
    assert data["measurements"]["runs"]["preflight"]["world_size"] == 2
    assert data["level"] == ("L1" if rows["l1.alignment"]["status"] == PASS else "L0")
    # L2's criteria here are passed or NOT MEASURED (compile, 4-device scaling): an L1 is a lower bound then,
    # and so is an L0 whose alignment was INCONCLUSIVE (undecided, not refuted); only a FAIL refutes the claim
    refuted = rows["l1.alignment"]["status"] == FAIL
    assert data["claimed_level"] == "L2" and data["claim_confirmed"] is (False if refuted else None)
    assert data["description"]["name"] == "cpu" and data["description"]["emulated"] is False
    measurements = data["measurements"]
    assert measurements["coverage"]["routes"]["unsupported"] == 0
    assert measurements["compare"]["ok"] is True
    assert measurements["bench"]["alignment"] == rows["l1.alignment"]["measured"]
    assert measurements["runs"]["train_step"]["ok"] is True


def test_gpt_on_emulated_chip(models):
    report = grade(load_model(f"{models}:gpt_small"), "emu:minimal", steps=4, warmup=1)
    data = report.data
    _check_common(data)
    rows = _by_id(data)
    for key in ("l0.train_step", "l0.unsupported_ops", "l1.autocast", "l1.precision", "l2.dynamic_shapes"):
        assert rows[key]["status"] == PASS, rows[key]
    # AdamW's in-place updates and the SDPA math path translate on the minimal chip: about half native.
    assert rows["l1.native_share"]["status"] == FAIL and rows["l1.native_share"]["measured"] < 0.8
    # Timing an emulation says nothing about the chip: not measured, and the report says why.
    alignment = rows["l1.alignment"]
    assert alignment["status"] == NOT_MEASURED and "emulation" in alignment["evidence"]
    assert "float16" in rows["l1.autocast"]["evidence"]
    assert "disables JIT" in rows["l2.compile"]["evidence"]
    assert rows["l2.distributed"]["status"] == NOT_MEASURED
    memory = rows["l2.memory"]
    assert memory["measured"] in ("flat", "leak")
    assert memory["status"] == (PASS if memory["measured"] == "flat" else FAIL), memory  # status follows the number
    assert data["level"] == "L0" and data["claimed_level"] == "none" and data["claim_confirmed"] is None
    assert "native share of calls" in data["level_reason"] and "performance alignment" in data["level_reason"]
    text = render_text(report)
    assert "emulated chip" in text and "NOT MEASURED never counts as PASS" in text
    assert "L0 (L1 not reached: 1 criterion failed (native share of calls)" in text


def test_unusual_on_emulated_chip_fails_l0_naming_the_op(models, tmp_path):
    data = _grade_cli(models, "unusual_small", "emu:minimal", tmp_path)
    _check_common(data)
    rows = _by_id(data)
    run = rows["l0.train_step"]
    assert run["status"] == FAIL and "UnsupportedOperatorError" in run["evidence"]
    # the real run stops where the chip would: rfft's kernel produces complex64, which minimal lacks
    assert "aten::_fft_r2c.default" in run["evidence"] and "produces complex64" in run["evidence"]
    trace = rows["l0.unsupported_ops"]
    assert trace["status"] == FAIL and trace["measured"] >= 1
    assert "aten::abs.default (complex64) called by spectral" in trace["evidence"]
    for key in RUNS_ON_DEVICE:
        assert rows[key]["status"] == NOT_MEASURED and "skipped" in rows[key]["evidence"]
    assert data["level"] == "none" and data["level_reason"].startswith("L0 not reached: 2 criteria failed")


@pytest.mark.parametrize("factory", ["cnn_small", "unusual_small"])
def test_cnn_and_unusual_on_cpu(models, tmp_path, factory):
    data = _grade_cli(models, factory, "cpu", tmp_path)
    _check_common(data)
    rows = _by_id(data)
    for key in ("l0.train_step", "l0.unsupported_ops", "l1.native_share", "l1.autocast", "l1.precision",
                "l2.dynamic_shapes"):
        assert rows[key]["status"] == PASS, rows[key]
    _check_alignment(rows["l1.alignment"], data["measurements"]["bench"])
    # every other L0/L1 criterion passed above: the level follows the (noisy) alignment alone
    assert data["level"] == ("L1" if rows["l1.alignment"]["status"] == PASS else "L0"), data["level_reason"]


def test_cnn_on_emulated_chip(models, tmp_path):
    # Batch norm's empty uint8 reserve buffer (size 0) holds no uint8 data: the emulated device does not
    # flag it although minimal has no uint8, and the trace agrees; the step runs on emu:minimal.
    data = _grade_cli(models, "cnn_small", "emu:minimal", tmp_path)
    _check_common(data)
    rows = _by_id(data)
    assert rows["l0.train_step"]["status"] == PASS and rows["l0.unsupported_ops"]["status"] == PASS
    assert "emu:minimal" in rows["l0.train_step"]["evidence"]
    # timing an emulation says nothing about the chip, so L1 (which needs alignment) cannot be reached
    assert rows["l1.alignment"]["status"] == NOT_MEASURED
    assert data["level"] == "L0", data["level_reason"]


def test_second_shape_needs_a_batch_dim(models, tmp_path):
    data = _grade_cli(models, "scalar_input", "cpu", tmp_path)
    row = _by_id(data)["l2.dynamic_shapes"]
    assert row["status"] == NOT_MEASURED and "no dim 0" in row["evidence"]


@pytest.mark.slow
def test_compile_is_opt_in(models, tmp_path):
    data = _grade_cli(models, "tiny", "cpu", tmp_path, "--compile")
    rows = _by_id(data)
    assert rows["l2.compile"]["status"] == PASS, rows["l2.compile"]
    assert "inductor" in rows["l2.compile"]["evidence"]
    assert rows["l2.dynamic_shapes"]["status"] == PASS
    assert "ran eager and compiled" in rows["l2.dynamic_shapes"]["evidence"]
    assert data["measurements"]["runs"]["compile"]["ok"] is True


def test_a_preflight_that_cannot_run_fails_with_its_error(models, tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "torch_fl.distributed.launch", None)  # import raises ImportError
    data = _grade_cli(models, "tiny", "cpu", tmp_path, preflight=True)
    row = _by_id(data)["l2.distributed"]
    assert row["status"] == FAIL and "raised ModuleNotFoundError" in row["evidence"], row
    assert data["measurements"]["runs"]["preflight"]["ok"] is False


def test_no_preflight_flag(models, tmp_path):
    row = _by_id(_grade_cli(models, "tiny", "cpu", tmp_path))["l2.distributed"]
    assert row["status"] == NOT_MEASURED and "--no-preflight" in row["evidence"]


def test_user_visible_text_cites_nothing_users_do_not_have(models):
    report = grade(load_model(f"{models}:tiny"), "cpu", steps=4, warmup=1, preflight=False)
    text = json.dumps(report.data) + render_text(report)
    for private in ("issue 7", "seed/", "article"):
        assert private not in text


# ----------------------------------------------------------------------------------------- level rules

def _all(status: str) -> list:
    rows = criteria(4, "rtol 1e-4")
    for row in rows:
        row.set(status, None if status == NOT_MEASURED else 1.0, "test")
    return rows


def test_not_measured_never_counts_as_pass():
    rows = _all(PASS)
    assert achieved_level(rows) == ("L2", "")
    rows[-1].set(NOT_MEASURED, None, "not run")
    level, why = achieved_level(rows)
    assert level == "L1" and why == "L2 not reached: 1 criterion not measured (memory flat over steps)"
    rows[0].set(NOT_MEASURED, None, "not run")
    assert achieved_level(rows)[0] == "none"
    assert achieved_level(_all(NOT_MEASURED))[0] == "none"


def test_a_level_needs_every_level_below():
    rows = _all(PASS)
    next(r for r in rows if r.id == "l1.precision").set(FAIL, 3, "3 tensors outside tolerance")
    level, why = achieved_level(rows)
    assert level == "L0" and why == "L1 not reached: 1 criterion failed (precision vs reference)"


def test_claim_check():
    assert claim_check("none", "L1")[0] is None
    assert claim_check("L1", "L1") == (True, "confirmed for this model: claims L1, measured L1")
    assert claim_check("L1", "L2")[0] is True
    assert claim_check("L2", "L1")[0] is False
    assert claim_check("L0", "none")[0] is False


def test_a_claim_blocked_only_by_what_was_not_measured_is_not_refuted():
    """On an emulated chip L1's alignment is NOT MEASURED: with every measured criterion passing, 'claims L1,
    measured L0' read as a failure; the measured level is a lower bound there (issue 42)."""
    rows = _all(PASS)
    next(r for r in rows if r.id == "l1.alignment").set(NOT_MEASURED, None, "emulated chip")
    level, _ = achieved_level(rows)
    confirmed, text = claim_check("L1", level, rows)
    assert level == "L0" and confirmed is None
    assert text.startswith("not decided here: claims L1; L0 measured is a lower bound") and "nothing failed" in text
    next(r for r in rows if r.id == "l1.precision").set(FAIL, 3, "3 tensors outside tolerance")
    assert claim_check("L1", achieved_level(rows)[0], rows)[0] is False


def test_halved_inputs():
    import torch

    tokens, mask = torch.zeros(8, 64), torch.ones(8, 1)
    halved = halved_inputs((tokens, mask, 3))
    assert [t.shape[0] for t in halved[:2]] == [4, 4] and halved[2] == 3
    assert halved_inputs((torch.tensor(1.0),)) is None
    assert halved_inputs((torch.zeros(1, 5),)) is None
    assert halved_inputs((7,)) is None


# ----------------------------------------------------------------------------------------------- CLI

def test_usage_errors(models, capsys):
    with pytest.raises(SystemExit) as exc:
        main(["grade", f"{models}:tiny", "--device", "cpu", "--steps", "0"])
    assert exc.value.code == 2
    assert "argument --steps: must be a whole number >= 1, got '0'" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exc:
        main(["grade", f"{models}:tiny"])
    assert exc.value.code == 2


def test_html_report_renders_in_chromium(models, tmp_path):
    page = tmp_path / "grade.html"
    assert main(["grade", f"{models}:gpt_small", "--device", "emu:minimal", "--steps", "4", "--warmup", "1",
                 "--html", str(page)]) == 0
    result = _run_chromium(page, tmp_path, "--dump-dom")
    assert result.returncode == 0, result.stderr[-2000:]
    assert console_errors(result.stderr) == [], result.stderr[-4000:]
    dom = result.stdout
    # Routes bar chart and coverage's per-module chart, compare's per-module error, bench's memory.
    assert dom.count('<svg class="chart-svg chart-wide"') == 4  # each also laid out narrow, for phones
    for title in ("Calls per route (coverage --train)", "Max relative error per module",
                  "Memory after each step"):
        assert title in dom
    assert "NOT MEASURED" in dom and "L0: the model runs" in dom


def test_noisy_alignment_is_flagged():
    def mode(median: float, p90: float) -> dict:
        return {"latency_ms": {"median": median, "p90": p90}}

    assert grade_module.noisy_modes({"routed": mode(10, 12), "native": mode(10, 20)}) == ["native"]
    assert grade_module.noisy_modes({"routed": mode(10, 14), "native": mode(10, 15)}) == []
    assert grade_module.noisy_modes({"error": "stopped", "steps": 4}) == []
    assert grade_module.noisy_modes(None) == []


def test_grade_hands_coverage_the_device_it_resolved(monkeypatch):
    # grade resolves its device once; coverage uses that ResolvedDevice (its description, emulated or not)
    # instead of turning it back into a string and resolving it again.
    import torch

    from torch_fl import device as fl_device
    from torch_fl.analysis.coverage import coverage
    from torch_fl.analysis.grade.runs import Measurements, measure_coverage
    from torch_fl.analysis.model import ModelSpec

    spec = ModelSpec("linear", torch.nn.Linear(4, 2), (torch.randn(3, 4),), None)
    target = grade_module._target(spec, "cpu", "cpu")  # coverage("cpu") used to resolve 'cpu' twice more
    assert not target.emulated and target.desc.name == "cpu" and target.reference_type == "cpu"
    calls = []
    real = fl_device.resolve_spec
    monkeypatch.setattr(fl_device, "resolve_spec", lambda *a, **k: calls.append(a) or real(*a, **k))
    found = Measurements()
    measure_coverage(target, found)
    assert calls == [], f"coverage resolved {calls} again"
    assert found.coverage_report.data["device"] == "cpu" and found.coverage["calls"] > 0
    monkeypatch.setattr(fl_device, "resolve_spec", real)
    assert coverage(spec, "cpu", train=True).data["summary"] == found.coverage_report.data["summary"]


# ------------------------------------------------------------------------- alignment: noise and decision

def _pairs(ratios: list[float], routed: float = 0.01) -> list[tuple[float, float]]:
    return [(routed, routed * r) for r in ratios]


def _synthetic(center: float, spread: float, n: int = 60, seed: int = 0) -> list[tuple[float, float]]:
    import random

    rng = random.Random(seed)
    return _pairs([center * (1 + rng.uniform(-spread, spread)) for _ in range(n)])


def test_decision_rule_on_synthetic_samples():
    clear_pass = alignment_interval(_synthetic(1.00, 0.05))
    clear_fail = alignment_interval(_synthetic(0.60, 0.05))
    straddle = alignment_interval(_synthetic(0.90, 0.30))
    assert clear_pass["low"] > 0.9 and decide(clear_pass["low"], clear_pass["high"], 0.9) == PASS
    assert clear_fail["high"] < 0.9 and decide(clear_fail["low"], clear_fail["high"], 0.9) == FAIL
    assert straddle["low"] < 0.9 < straddle["high"]
    assert decide(straddle["low"], straddle["high"], 0.9) == INCONCLUSIVE
    # too few pairs: no interval, never a verdict
    few = alignment_interval(_synthetic(1.0, 0.01, n=4))
    assert few["low"] is None and decide(few["low"], few["high"], 0.9) == INCONCLUSIVE
    assert decide(0.9, 1.2, 0.9) == PASS and decide(0.5, 0.8999, 0.9) == FAIL


def test_descheduled_steps_widen_the_interval_instead_of_moving_the_estimate():
    quiet = _synthetic(1.0, 0.03, n=40)
    # a third of the pairs hit by load on one side or the other (a step 5-50x longer)
    noisy = [(r * (20 if i % 6 == 0 else 1), n * (30 if i % 6 == 3 else 1)) for i, (r, n) in enumerate(quiet)]
    a, b = alignment_interval(quiet), alignment_interval(noisy)
    assert abs(a["estimate"] - 1.0) < 0.03 and abs(b["estimate"] - 1.0) < 0.05
    assert alignment_interval(noisy) == b, "seeded: the same steps give the same interval"


def test_a_burst_that_shifts_whole_rounds_is_inconclusive_not_a_fail():
    """The pairs of a round share their moment: when 4 of 6 rounds had their routed block slowed (all
    five pairs at 0.74) the per-pair bootstrap called it a tight FAIL (0.658-0.798 in CI, for a model
    whose every op is native); resampling rounds says the evidence is 6 rounds, not 30 pairs."""
    burst = [[(0.01 / 0.74, 0.01)] * 5 for _ in range(4)]
    quiet = [[(0.01, 0.01)] * 5 for _ in range(2)]
    rounds = burst[:2] + quiet[:1] + burst[2:] + quiet[1:]
    clustered = alignment_interval(rounds)
    assert clustered["rounds"] == 6 and clustered["pairs"] == 30
    assert clustered["low"] < 0.9 < clustered["high"]
    assert decide(clustered["low"], clustered["high"], 0.9) == INCONCLUSIVE
    # the same shift in every round is the model's: decided
    steady = alignment_interval([[(0.01 / 0.74, 0.01)] * 5 for _ in range(6)])
    assert decide(steady["low"], steady["high"], 0.9) == FAIL
    # too few rounds give no interval, whatever the pairs
    assert alignment_interval(rounds[:3])["low"] is None


def _simulated_rounds(rng, ratio: float, steps: int, *, jitter: float, spike_p: float, walk: float,
                      drift: float, burst_p: float, base: float = 0.05) -> list[list[tuple[float, float]]]:
    """bench's rounds for a model whose true alignment is `ratio`, on a loaded machine: blocks in bench's
    own schedule, a load level that random-walks (log scale) step by step and drifts across the run,
    bursts that slow a whole block (another job starting), per-step jitter, and steps descheduled for
    0.5-4 step times."""
    import math

    from torch_fl.analysis.bench import _schedule, paired_rounds

    block = max(2, min(5, steps // 4))  # bench's default block
    plan = _schedule(steps, block)
    total = sum(n + 2 for _, n in plan)  # 2 settling steps per block pass time too
    blocks, load, t = [], 0.0, 0
    for mode, n in plan:
        burst = rng.uniform(1.5, 4.0) if rng.random() < burst_p else 1.0
        times = []
        for i in range(n + 2):
            load, t = load + rng.gauss(0, walk), t + 1
            if i < 2:
                continue
            true = base / ratio if mode == "routed" else base
            took = true * math.exp(load + drift * t / total + rng.gauss(0, jitter)) * burst
            times.append(took + (base * rng.uniform(0.5, 4.0) if rng.random() < spike_p else 0.0))
        blocks.append((mode, times))
    return paired_rounds(blocks)


LOADS = {  # (jitter, spike_p, walk, drift, burst_p)
    "quiet": (0.03, 0.01, 0.005, 0.0, 0.0),
    "busy": (0.15, 0.15, 0.08, 0.3, 0.2),
    "bursty": (0.15, 0.3, 0.08, 0.3, 0.4),
    "drifting": (0.05, 0.05, 0.15, 1.0, 0.1),
}


@pytest.mark.parametrize("load", sorted(LOADS))
@pytest.mark.parametrize("steps", [30, 120])
@pytest.mark.parametrize("ratio", [1.0, 0.8])
def test_the_interval_holds_its_stated_coverage_under_load(load, steps, ratio):
    """Simulated load (random-walk level, drift, bursts, descheduled steps) on bench's schedule: the
    alignment interval contains the true ratio in at least its stated share of 400 runs. The cluster
    bootstrap it replaces covered 83.5-98% here for a stated 95%, below 95% in 15 of
    the 16 cases (issue 42: two '95%' intervals of one
    all-native model, [1.187, 1.781] and [0.483, 0.976], did not even overlap)."""
    import random

    from torch_fl.analysis.bench import CONFIDENCE

    jitter, spike_p, walk, drift, burst_p = LOADS[load]
    rng = random.Random(f"{load}-{steps}-{ratio}")
    runs, covered = 400, 0
    for _ in range(runs):
        interval = alignment_interval(_simulated_rounds(rng, ratio, steps, jitter=jitter, spike_p=spike_p,
                                                        walk=walk, drift=drift, burst_p=burst_p))
        assert interval["low"] is not None, interval
        covered += interval["low"] <= ratio <= interval["high"]
    assert covered / runs >= CONFIDENCE, f"{covered}/{runs} covered {ratio}"


def test_the_interval_decides_a_quiet_machine():
    """Coverage alone is easy (an infinite interval has it): on a quiet machine the interval is narrow
    enough to decide 1.0 and 0.8 against 0.9 from the default 30 steps."""
    import random

    rng = random.Random(0)
    for ratio, verdict in ((1.0, PASS), (0.8, FAIL)):
        decided = [decide(i["low"], i["high"], 0.9)
                   for i in (alignment_interval(_simulated_rounds(rng, ratio, 30, jitter=0.03, spike_p=0.01,
                                                                  walk=0.005, drift=0.0, burst_p=0.0))
                             for _ in range(50))]
        assert decided.count(verdict) == 50, decided


def test_load_makes_the_alignment_inconclusive_and_the_level_says_what_it_rests_on(models):
    """A clear interval measured while the timing thread waited for a core most of the time is still no
    verdict: load, not the model, decided those step times, so a loaded machine gives one level (the
    lower bound) run after run instead of L0 and L1 in turn (issue 42)."""
    from torch_fl.analysis.bench import load_data
    from torch_fl.analysis.grade import levels
    from torch_fl.analysis.grade.presentation import _level_text

    target = grade_module._target(load_model(f"{models}:tiny"), "cpu", "cpu")
    rows = criteria(30, "x")
    by_id = {c.id: c for c in rows}
    latency = {"median": 10.0, "p90": 11.0}
    bench = {"routed": {"steps_per_s": 100.0, "latency_ms": latency},
             "native": {"steps_per_s": 101.0, "latency_ms": latency}, "steps": 30,
             "alignment_interval": alignment_interval([[(0.01, 0.01)] * 5 for _ in range(6)]),
             "load": load_data(0.7, 1.0)}
    bench["alignment"] = bench["alignment_interval"]["estimate"]
    assert decide(bench["alignment_interval"]["low"], bench["alignment_interval"]["high"], 0.9) == PASS
    levels.judge_alignment(by_id["l1.alignment"], target, bench)
    assert by_id["l1.alignment"].status == INCONCLUSIVE
    evidence = by_id["l1.alignment"].evidence
    assert "load made it unmeasurable: the timing thread waited for a core 70%" in evidence
    # each figure says what it is: "ratio 0.957: routed 6.22 vs 5.51 steps/s" printed a paired median beside
    # per-mode figures whose quotient is 1.13 (issue 42)
    assert "alignment 1.000 (the median over rounds of each round's median pair ratio)" in evidence
    assert "per-mode median steps: routed 100, routing disabled 101 steps/s" in evidence
    assert "(their quotient 0.990 is not the paired alignment)" in evidence
    for c in rows:
        if c.id != "l1.alignment" and c.level in ("L0", "L1"):
            c.set(PASS, 1.0, "")
    level, why = achieved_level(rows)
    data = {"level": level, "level_reason": why, "criteria": [c.row() for c in rows]}
    assert level == "L0"
    assert _level_text(data).endswith("a lower bound: nothing failed, 3 of 4 L1 criteria passed and L1 rests on "
                                      "performance alignment (INCONCLUSIVE)"), _level_text(data)
    assert claim_check("L1", level, rows)[0] is None  # undecided, not refuted
    bench["load"] = load_data(0.01, 1.0)  # the same interval on a quiet machine decides
    levels.judge_alignment(by_id["l1.alignment"], target, bench)
    assert by_id["l1.alignment"].status == PASS


def test_an_inconclusive_alignment_names_the_command_and_warns_first(models, monkeypatch):
    from torch_fl.analysis.grade import levels

    spec = load_model(f"{models}:tiny")
    target = grade_module._target(spec, "cpu", "cpu")
    row = next(c for c in criteria(30, "x") if c.id == "l1.alignment")
    bench = {"routed": {"steps_per_s": 100.0}, "native": {"steps_per_s": 105.0}, "steps": 30,
             "alignment": 0.95, "alignment_interval": alignment_interval(_synthetic(0.9, 0.3, n=30))}
    bench["alignment"] = bench["alignment_interval"]["estimate"]
    levels.judge_alignment(row, target, bench)
    assert row.status == INCONCLUSIVE and isinstance(row.measured, float)
    assert f"Settle it with `torchfl grade {models}:tiny --device cpu --steps " in row.evidence
    report = grade(spec, "cpu", steps=4, warmup=1, preflight=False)
    if _by_id(report.data)["l1.alignment"]["status"] == INCONCLUSIVE:
        assert report.warnings[0].startswith("performance alignment is INCONCLUSIVE"), report.warnings
        assert "L1 not reached" in report.data["level_reason"] and "inconclusive" in report.data["level_reason"]


@pytest.mark.slow
def test_the_same_model_graded_five_times_under_load_gets_one_level(models, tmp_path):
    """Two busy loops (started here, on any core) while grade runs five times: one level every time
    (issue 42: L0, L1, L0, L0, L1). On this 2-core machine the timing thread then waits for a core far
    above LOAD_LIMIT, so the alignment is INCONCLUSIVE each time and the level says it rests on it; on a
    machine with cores to spare the loops do not load grade, and the alignment is decided each time."""
    import os
    import subprocess

    busy = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(2)]
    try:
        runs = []
        for i in range(5):
            out = tmp_path / f"g{i}.json"
            subprocess.run([sys.executable, "-m", "torch_fl", "grade", f"{models}:gpt_small", "--device", "cpu",
                            "--no-preflight", "--json", str(out)], env=os.environ, check=True, timeout=600,
                           capture_output=True)
            runs.append(json.loads(out.read_text()))
    finally:
        for loop in busy:
            loop.kill()
            loop.wait()
    details = [(r["level"], _by_id(r)["l1.alignment"]["evidence"][:300]) for r in runs]
    assert len({r["level"] for r in runs}) == 1, details
    assert len({_by_id(r)["l1.alignment"]["status"] for r in runs}) == 1, details
    for r in runs:
        if _by_id(r)["l1.alignment"]["status"] == INCONCLUSIVE:
            assert r["level"] == "L0" and "inconclusive (performance alignment)" in r["level_reason"], details
