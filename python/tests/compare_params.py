"""compare_params.py A.pt B.pt RTOL: exit 0 when every tensor agrees."""
import sys

import torch

a, b, rtol = torch.load(sys.argv[1]), torch.load(sys.argv[2]), float(sys.argv[3])
assert a.keys() == b.keys(), (a.keys(), b.keys())
worst = 0.0
for k in a:
    d = ((a[k] - b[k]).abs() / (b[k].abs() + 1e-3)).max().item()
    worst = max(worst, d)
    if not torch.allclose(a[k], b[k], rtol=rtol, atol=rtol * 1e-2):
        sys.exit("%s differs: max relative difference %.3g" % (k, d))
print("parameters agree: max relative difference %.3g" % worst)
