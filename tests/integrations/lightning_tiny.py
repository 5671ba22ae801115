"""The tiny LightningModule every Lightning test trains: in the test process (test_lightning.py) and in the
scripts those tests start (their PYTHONPATH names this folder: the DDP ranks, a fresh process with the alias).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytorch_lightning as pl
import torch


def pythonpath() -> str:
    """The PYTHONPATH of a script that imports this module: its folder first, then what was there."""
    return os.pathsep.join(filter(None, [str(Path(__file__).resolve().parent), os.environ.get("PYTHONPATH")]))


class Tiny(pl.LightningModule):
    """A Linear(4, 2) trained by SGD on `samples` seeded random rows, 4 a batch. Records where every step ran
    and in which dtype the Linear computed: `seen`, one (batch device, weight device, dtype) a step."""

    def __init__(self, samples: int = 8) -> None:
        super().__init__()
        self.layer = torch.nn.Linear(4, 2)
        self.samples = samples
        self.seen: list[tuple[str, str, str]] = []

    def training_step(self, batch, batch_idx):
        x, y = batch
        out = self.layer(x)
        self.seen.append((str(x.device), str(self.layer.weight.device), str(out.dtype).removeprefix("torch.")))
        return torch.nn.functional.mse_loss(out.float(), y)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)

    def train_dataloader(self):
        g = torch.Generator().manual_seed(0)
        data = torch.utils.data.TensorDataset(torch.randn(self.samples, 4, generator=g),
                                              torch.randn(self.samples, 2, generator=g))
        return torch.utils.data.DataLoader(data, batch_size=4)
