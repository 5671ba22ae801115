import torch

scaler = torch.cuda.amp.GradScaler()
tuned = torch.cuda.amp.GradScaler(init_scale=2.0**10, enabled=True)
positional = torch.cuda.amp.GradScaler(1024.0)
