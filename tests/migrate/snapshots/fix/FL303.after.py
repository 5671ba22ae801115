import torch
import contextlib
import torch_fl  # noqa: F401  (installs torch.fl)


def step(model, x):
    with torch.autocast(torch.fl.device_type(), dtype=torch.bfloat16) if torch.fl.is_accelerator() else contextlib.nullcontext():
        y = model(x)
    with torch.autocast(device_type=torch.fl.device_type()) if torch.fl.is_accelerator() else contextlib.nullcontext():
        z = model(y)
    with torch.amp.autocast(torch.fl.device_type()) if torch.fl.is_accelerator() else contextlib.nullcontext():
        w = model(z)
    scaler = torch.amp.GradScaler(torch.fl.device_type(), enabled=torch.fl.is_accelerator())
    return w, scaler
