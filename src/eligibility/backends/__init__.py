"""Backends: the same policy, by hand in NumPy (numpy.py) or with autograd in torch (torch.py)."""
