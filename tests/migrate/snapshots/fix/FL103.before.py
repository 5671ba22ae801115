"""FL103: a legacy CUDA type name compared as a string asks "this dtype, on the accelerator?"."""
import torch


def half_on_gpu(x):
    return x.type() == "torch.cuda.HalfTensor"


def needs_cast(module):
    if module.weight.type() != "torch.cuda.FloatTensor":
        module.float()


def as_half(x):
    return x.to(torch.float16)
