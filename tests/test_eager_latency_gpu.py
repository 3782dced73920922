"""GPU: bench/eager_latency.py runs as one command and writes its CSV keyed by card and commit,
each row carrying the command (issue 18); a short run, not a measurement."""
import csv
import subprocess
import sys

import pytest

from conftest import ROOT

pytestmark = pytest.mark.gpu


def test_eager_latency_writes_keyed_csv(tmp_path):
    from cudal2.device import current
    from cudal2.versions import source_commit
    args = ["--shapes", "64x64x64:nn,1x4096x4096:nt", "--tokens", "", "--calls", "50", "--out", str(tmp_path)]
    r = subprocess.run([sys.executable, str(ROOT / "bench" / "eager_latency.py"), *args], cwd=ROOT,
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    key, commit = current().key, source_commit()
    path = tmp_path / f"eager_latency_{key}_{commit}.csv"
    rows = list(csv.DictReader(path.open()))
    assert [row["problem"] for row in rows] == ["64x64x64:nn", "1x4096x4096:nt"]
    for row in rows:
        assert row["device"] == key and row["commit"] == commit and "--calls 50" in row["command"]
        assert float(row["cudal2_eager_us"]) > 0 and float(row["torch_eager_us"]) > 0
    assert float(rows[1]["linear_eager_us"]) > 0
    assert "64x64x64:nn: cudal2" in r.stdout and "1x4096x4096:nt: cudal2" in r.stdout
