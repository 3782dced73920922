"""cudal2.stats.shape_class is the package's copy of ../shared/classes.py (the one definition every
target uses; it is not installed with the package, so the device cannot import it)."""
from __future__ import annotations

import importlib.util
from collections import Counter
from pathlib import Path

import pytest

from cudal2.problems import grid
from cudal2.stats import SHAPE_CLASSES, shape_class

SHARED = Path(__file__).resolve().parents[2] / "shared" / "classes.py"


def test_grid_class_counts():
    # The counts ../shared/KERNELS.md gives for the 1000 grid (nn).
    got = Counter(shape_class(p.M, p.N, p.K) for p in grid())
    assert got == {"small": 304, "skinny": 64, "starved": 215, "shortK": 148, "mid": 82, "large": 187}


def test_boundaries():
    assert shape_class(64, 64, 64) == "small"
    assert shape_class(64, 16384, 16384) == "skinny"          # 34 GFLOP, M = 64
    assert shape_class(1024, 1024, 8192) == "starved"          # 64 tiles of 128x128
    assert shape_class(4096, 4096, 512) == "shortK"            # 1024 tiles, K = 512
    assert shape_class(4096, 4096, 1024) == "mid"
    assert shape_class(4096, 4096, 4096) == "large"            # 137 GFLOP
    assert set(SHAPE_CLASSES) == {"small", "skinny", "starved", "shortK", "mid", "large"}


@pytest.mark.skipif(not SHARED.is_file(), reason="../shared/classes.py is not beside this checkout")
def test_agrees_with_shared_definition():
    spec = importlib.util.spec_from_file_location("shared_classes", SHARED)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    assert tuple(mod.CLASSES) == SHAPE_CLASSES
    for p in grid():
        for q in (p, type(p)(max(1, p.M // 3), p.N + 7, p.K)):    # off-grid sizes too
            assert shape_class(q.M, q.N, q.K) == mod.shape_class(q.M, q.N, q.K), q
