import time

import torch
import torch_fl  # noqa: F401  (installs torch.fl)


def timed(fn):
    torch.fl.synchronize()
    start = time.perf_counter()
    fn()
    torch.fl.synchronize(0)  # wait for the kernels
    return time.perf_counter() - start
