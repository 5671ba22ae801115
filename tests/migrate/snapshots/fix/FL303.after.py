import torch
import torch_fl  # noqa: F401  (installs torch.fl)


def step(model, x):
    with torch.autocast(torch.fl.device_type(), dtype=torch.bfloat16, enabled=torch.fl.is_accelerator()):
        y = model(x)
    with torch.autocast(device_type=torch.fl.device_type(), enabled=torch.fl.is_accelerator()):
        z = model(y)
    with torch.amp.autocast(torch.fl.device_type(), enabled=torch.fl.is_accelerator()):
        w = model(z)
    scaler = torch.amp.GradScaler(torch.fl.device_type(), enabled=torch.fl.is_accelerator())
    return w, scaler
