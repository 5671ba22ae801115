#!/usr/bin/env python
"""Issue 37 item 4: the safe fix sites of six repositories never measured before, isolated and run before and
after `torchfl fix` on the CPU host and on FL_DEVICE=emu:npu / emu:mps (docs/migrate-judges.md).

    python tests/migrate/realworld_round_five.py /work/.mirror

MIRRORS holds the `fetch` mirrors (owner+name/repo). The machinery is scripts/realworld_judge.py's
`functions` (extract each definition with the module's imports it uses, fix a copy with the safe fixes, run
both on the CPU, run the fixed copy on the emulated chips with every call into torch.cuda recorded); this
file only names this round's functions and the calls that reach their fix sites. Not collected by pytest:
it needs the mirrors.
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "scripts"))

import realworld_judge  # noqa: E402

_LOGITS = "torch.tensor([2.0, -1.0, 0.5, 1.5, -0.2]).to(DEV)"
_TARGETS = "torch.tensor([1.0, 0.0, 0.0, 1.0, 0.0]).to(DEV)"
_PI0_CONFIG = ("__import__('types').SimpleNamespace(image_resolution=(4, 4), chunk_size=2, max_action_dim=3, max_state_dim=3, "
               "num_inference_steps=1)")

# (mirror, path, top-level names, calls): every function of the six trees whose findings all have a safe fix
# and whose code needs only the standard library, torch and numpy (found with the trees' scan at 4dc0f6d),
# plus VideoMAE's scaler class (its one other name is not called on the path run here).
FUNCTIONS = [
    ("WongKinYiu+yolov7", "utils/loss.py", "RankSort",
     [f"RankSort.apply({_LOGITS}, {_TARGETS})",
      f"_grad(lambda x: sum(RankSort.apply(x, {_TARGETS})), {_LOGITS})"]),
    ("WongKinYiu+yolov7", "utils/loss.py", "aLRPLoss",
     [f"aLRPLoss.apply({_LOGITS}, {_TARGETS}, torch.tensor([0.3, 0.6]).to(DEV))",
      f"_grad(lambda x: aLRPLoss.apply(x, {_TARGETS}, torch.tensor([0.3, 0.6]).to(DEV))[0], {_LOGITS})"]),
    ("WongKinYiu+yolov7", "utils/loss.py", "APLoss",
     [f"APLoss.apply({_LOGITS}, {_TARGETS})", f"_grad(lambda x: APLoss.apply(x, {_TARGETS}), {_LOGITS})"]),
    ("WongKinYiu+yolov7", "utils/torch_utils.py", "time_synchronized", ["type(time_synchronized()).__name__"]),
    ("mosaicml+composer", "composer/distributed/param_init.py", "meta_init",
     ["(lambda m: (m.register_buffer('b', torch.empty(2, device='meta')), meta_init(m, lambda mod: mod.b.fill_(1.5)),"
      " m.b)[2])(torch.nn.Module())"]),
    ("huggingface+lerobot", "tests/policies/groot/test_groot_lerobot.py", "cleanup_memory", ["cleanup_memory()"]),
    ("huggingface+lerobot", "tests/policies/pi0_pi05/test_pi05_compile.py", "_make_dummy_inputs",
     [f"(torch.manual_seed(0), _make_dummy_inputs({_PI0_CONFIG}))[1]"]),
    ("huggingface+lerobot", "tests/policies/pi0_pi05/test_pi0_compile.py", "_make_dummy_inputs",
     [f"(torch.manual_seed(0), _make_dummy_inputs({_PI0_CONFIG}))[1]"]),
    ("MCG-NJU+VideoMAE", "utils.py", "SmoothedValue,is_dist_avail_and_initialized",
     ["(lambda s: (s.update(1.0), s.update(3.0, n=2), s.synchronize_between_processes(), s.median, s.avg,"
      " s.global_avg, str(s))[3:])(SmoothedValue())"]),
    ("MCG-NJU+VideoMAE", "utils.py", "NativeScalerWithGradNormCount",
     ["(torch.manual_seed(0), (lambda m: (NativeScalerWithGradNormCount()(m(torch.ones(1, 2).to(DEV)).sum(),"
      " torch.optim.SGD(m.parameters(), lr=0.1), clip_grad=1.0, parameters=m.parameters()), m.weight.detach()))"
      "(torch.nn.Linear(2, 1).to(DEV)))[1]"]),
]


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        sys.exit(__doc__)
    realworld_judge.FUNCTIONS = FUNCTIONS
    return realworld_judge.functions(argv[0])


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
