"""FL103: a legacy CUDA type name compared as a string asks "this dtype, on the accelerator?"."""
import torch
import torch_fl  # noqa: F401  (installs torch.fl)


def half_on_gpu(x):
    return (x.dtype == torch.float16 and torch.fl.is_accelerator(x.device))


def needs_cast(module):
    if not (module.weight.dtype == torch.float32 and torch.fl.is_accelerator(module.weight.device)):
        module.float()


def as_half(x):
    return x.to(torch.float16)
