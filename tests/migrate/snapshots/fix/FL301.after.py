import torch
import contextlib
import torch_fl  # noqa: F401  (installs torch.fl)


def step(model, x):
    with torch.autocast(torch.fl.device_type()) if torch.fl.is_accelerator() else contextlib.nullcontext():
        y = model(x)
    with torch.autocast(torch.fl.device_type(), dtype=torch.bfloat16) if torch.fl.is_accelerator() else contextlib.nullcontext():
        z = model(y)
    with torch.autocast(torch.fl.device_type(), **model.autocast_kwargs) if torch.fl.is_accelerator() else contextlib.nullcontext():  # ColossalAI's CheckpointFunction
        z = model(z)
    with torch.autocast(torch.fl.device_type(), enabled=False) if torch.fl.is_accelerator() else contextlib.nullcontext():  # fp32 region
        return model(z)
