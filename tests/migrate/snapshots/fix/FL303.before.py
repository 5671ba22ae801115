import torch


def step(model, x):
    with torch.autocast("cuda", dtype=torch.bfloat16):
        y = model(x)
    with torch.autocast(device_type="cuda"):
        z = model(y)
    with torch.amp.autocast("cuda"):
        w = model(z)
    scaler = torch.amp.GradScaler("cuda")
    return w, scaler
