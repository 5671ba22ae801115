import torch
import torch_fl  # noqa: F401  (installs torch.fl)

a = torch.zeros(1).cuda()  # noqa: FL102
b = torch.zeros(1).cuda()  # noqa
c = torch.zeros(1).to(torch.fl.device())  # noqa: FL101
torch.cuda.synchronize()  # noqa: FL202
