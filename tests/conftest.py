"""Suite-wide settings."""

import os

import torch

# under pytest-xdist (make test) every core runs its own worker: one intra-op thread each,
# so two workers do not fight over the cores' caches with four threads
if os.environ.get("PYTEST_XDIST_WORKER"):
    torch.set_num_threads(1)
