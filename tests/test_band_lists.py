"""bench/*_band.txt, the shape lists `bench/device_run.sh band:NAME` sweeps: each names grid nt shapes
of its class, and the comma list the stage builds from it parses as hopper_sweep's --shapes."""
import subprocess
from pathlib import Path

import pytest

from cudal2.problems import Problem, grid, parse_shapes
from cudal2.stats import shape_class

BENCH = Path(__file__).resolve().parents[1] / "bench"


@pytest.mark.parametrize("name", ["small", "starved"])
def test_band_list_is_grid_nt_shapes_of_its_class(name):
    path = BENCH / f"{name}_band.txt"
    probs = [Problem.parse(line.split("#", 1)[0].strip()) for line in path.read_text().splitlines()
             if line.split("#", 1)[0].strip()]
    assert len(probs) == 40 and len(set(probs)) == 40
    on_grid = {(p.M, p.N, p.K) for p in grid()}
    for p in probs:
        assert p.layout == "nt" and (p.M, p.N, p.K) in on_grid, p
        assert shape_class(p.M, p.N, p.K) == name, p
    # what device_run.sh hands to hopper_sweep.py --shapes
    joined = subprocess.run(f"grep -v '^#' {path} | cut -d: -f1 | paste -sd, -", shell=True,
                            capture_output=True, text=True, check=True).stdout.strip()
    assert [(q.M, q.N, q.K) for q in parse_shapes(joined)] == [(p.M, p.N, p.K) for p in probs]
