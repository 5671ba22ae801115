"""Import aliases: `torch as th`, names imported from torch.cuda and torch.cuda.amp."""

from __future__ import annotations

import torch as th
from torch.cuda import synchronize
from torch.cuda.amp import GradScaler, autocast


def step(model, x):
    scaler = GradScaler()
    with autocast(dtype=th.float16):
        loss = model(x.cuda())
    synchronize()
    return scaler, loss
