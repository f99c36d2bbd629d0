"""Programs run under torchrun. They import torch, never pytest or yaml; ``rank`` is their contract."""
