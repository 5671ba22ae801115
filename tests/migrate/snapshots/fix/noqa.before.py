import torch

a = torch.zeros(1).cuda()  # noqa: FL102
b = torch.zeros(1).cuda()  # noqa
c = torch.zeros(1).cuda()  # noqa: FL101
torch.cuda.synchronize()  # noqa: FL202
