"""Import aliases: `torch as th`, names imported from torch.cuda and torch.cuda.amp."""

from __future__ import annotations

import torch as th
import contextlib
import torch_fl  # noqa: F401  (installs torch.fl)


def step(model, x):
    scaler = th.amp.GradScaler(th.fl.device_type(), enabled=th.fl.is_accelerator())
    with th.autocast(th.fl.device_type(), dtype=th.float16) if th.fl.is_accelerator() else contextlib.nullcontext():
        loss = model(x.to(th.fl.device()))
    th.fl.synchronize()
    return scaler, loss
