import time

import torch


def timed(fn):
    torch.cuda.synchronize()
    start = time.perf_counter()
    fn()
    torch.cuda.synchronize(0)  # wait for the kernels
    return time.perf_counter() - start
