#!/usr/bin/env python
# Copyright header comment.
"""A script that configures warnings before importing torch."""
import warnings

warnings.filterwarnings("ignore", category=UserWarning)

import torch  # noqa: E402

x = torch.zeros(1).cuda()
