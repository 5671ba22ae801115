# A snippet that never imports torch (a notebook cell): the scanner takes `torch` as torch.
x = torch.zeros(1).cuda()  # noqa: F821
