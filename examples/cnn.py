"""A small CNN image classifier: conv, batch norm, ReLU, max pool, adaptive average pool, linear.

Entry point for the analysis commands: ``torchfl coverage examples/cnn.py:factory --device mps``.
"""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F


class CNN(nn.Module):
    def __init__(self, classes: int = 10, width: int = 16):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(3, width, 3, padding=1), nn.BatchNorm2d(width), nn.ReLU(inplace=True), nn.MaxPool2d(2),
            nn.Conv2d(width, 2 * width, 3, padding=1), nn.BatchNorm2d(2 * width), nn.ReLU(inplace=True),
            nn.AdaptiveAvgPool2d(1),
        )
        self.classifier = nn.Linear(2 * width, classes)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        return self.classifier(torch.flatten(self.features(images), 1))


def factory(batch: int = 8, size: int = 32, classes: int = 10):
    torch.manual_seed(0)
    model = CNN(classes)
    images = torch.randn(batch, 3, size, size)
    labels = torch.randint(0, classes, (batch,))

    def loss_fn(logits: torch.Tensor, images: torch.Tensor) -> torch.Tensor:
        return F.cross_entropy(logits, labels.to(logits.device))  # the labels live on the host

    return model, (images,), loss_fn
