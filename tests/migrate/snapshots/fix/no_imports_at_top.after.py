#!/usr/bin/env python
# Copyright header comment.
"""A script that configures warnings before importing torch."""
import warnings

warnings.filterwarnings("ignore", category=UserWarning)

import torch  # noqa: E402
import torch_fl  # noqa: E402, F401  (installs torch.fl)

x = torch.zeros(1).to(torch.fl.device())
