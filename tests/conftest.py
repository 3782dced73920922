"""Test set-up: GPU tests are marked `gpu` and skipped where no CUDA GPU is visible."""
import os
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _has_gpu() -> bool:
    try:
        import torch
        return torch.cuda.is_available()
    except Exception:
        return False


HAS_GPU = _has_gpu()


def pytest_collection_modifyitems(config, items):
    if HAS_GPU:
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture
def hopper():
    """The sm_90a compile target (limits of the architecture, no card)."""
    from cudal2.device import DeviceInfo
    return DeviceInfo.target("sm_90a")


@pytest.fixture
def gpu_device():
    from cudal2.device import current
    return current()
