import torch


def step(model, x):
    with torch.cuda.amp.autocast():
        y = model(x)
    with torch.cuda.amp.autocast(dtype=torch.bfloat16):
        z = model(y)
    with torch.cuda.amp.autocast(**model.autocast_kwargs):  # ColossalAI's CheckpointFunction
        z = model(z)
    with torch.cuda.amp.autocast(False):  # fp32 region
        return model(z)
