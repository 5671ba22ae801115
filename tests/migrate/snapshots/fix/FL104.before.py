import torch

torch.set_default_device("cuda")
torch.set_default_device("cuda:2")
