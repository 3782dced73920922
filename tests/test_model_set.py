"""The model set of issue 22 (bench/model_set.py, bench/model_set.txt) and bench/grid_search.sh's
search-all loop over grid nn, grid nt and the model set (run with a stub `cudal2` on the PATH)."""
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from cudal2.problems import read_shape_file

BENCH = Path(__file__).resolve().parents[1] / "bench"
sys.path.insert(0, str(BENCH))
import model_set  # noqa: E402


def test_committed_model_set_is_what_the_configs_give():
    shapes = read_shape_file(str(BENCH / "model_set.txt"), "nt")
    assert [p.text for p in shapes] == model_set.model_set()        # not edited by hand, not stale
    # Four models of different hidden sizes; q/o and gate/up coincide within a model: 4 x 4 (N, K)
    # pairs (h x h, kv x h, inter x h, h x inter) at 14 token counts, all nt (nn.Linear).
    assert {p.K for p in shapes if p.N == p.K} == {2048, 3584, 4096, 8192}
    assert len(shapes) == 16 * 14 and {p.layout for p in shapes} == {"nt"}
    assert sorted({p.M for p in shapes}) == [2 ** i for i in range(14)]
    # Llama-3-70B's MLP (28672 x 8192 up, 8192 x 28672 down) and Llama-3.2-1B's k/v (512 x 2048).
    texts = {p.text for p in shapes}
    assert {"1x28672x8192:nt", "8192x8192x28672:nt", "16x512x2048:nt"} <= texts


def test_committed_decode_set_is_the_model_sets_decode_shapes():
    shapes = read_shape_file(str(BENCH / "model_decode_set.txt"), "nt")
    assert [p.text for p in shapes] == model_set.decode_set()
    # 16 (N, K) pairs at M 1, 2, 4, 8, 16, 32: the shapes decode_lead seeds (min(M, N) <= 32).
    assert len(shapes) == 16 * 6 and max(p.M for p in shapes) == 32
    assert {p.text for p in shapes} < set(model_set.model_set())


STUB = """#!/usr/bin/env bash
echo "$@" >>"$STUB_LOG"
case "$*" in *"--layout $STUB_STOP_AT"*) echo "stopped at the time limit: 3 of 1000 shapes not finished";; esac
exit 0
"""


def _run(tmp_path, stop_at, args=("search-all", "600"), extra_env=None, card="h200-sm90", held=None):
    """bench/grid_search.sh ARGS (search-all 600) in a scratch copy: device_env.sh stubbed (it would
    pip install), `cudal2` a stub that logs its arguments; returns the logged generate calls."""
    work = tmp_path / "w"
    (work / "bench").mkdir(parents=True)
    shutil.copy(BENCH / "grid_search.sh", work / "bench")
    # the stub card is an H200 unless a test says otherwise (device_env.sh exports the card's key)
    (work / "bench" / "device_env.sh").write_text(f"export CARD_KEY={card}\n")
    binp = tmp_path / "bin"
    binp.mkdir()
    if held is not None:                  # run/ from an earlier call: its card's stores ("" = before .card)
        (work / "run").mkdir()
        (work / "run" / ("grid.db" if held == "" else ".card")).write_text(held)
    (binp / "cudal2").write_text(STUB)
    (binp / "cudal2").chmod(0o755)
    log = tmp_path / "calls.log"
    env = {**os.environ, "PATH": f"{binp}:{os.environ['PATH']}", "OUT": str(tmp_path / "out"),
           "STUB_LOG": str(log), "STUB_STOP_AT": stop_at, "HOME": str(tmp_path), **(extra_env or {})}
    res = subprocess.run(["bash", "bench/grid_search.sh", *args], cwd=work, env=env,
                         capture_output=True, text=True, timeout=60)
    _run.result = res
    calls = log.read_text().splitlines() if log.exists() else []
    return [line for line in calls if line.startswith("generate")]


def test_search_all_runs_the_three_sets_in_order_with_resume(tmp_path):
    calls = _run(tmp_path, stop_at="none")
    assert [c.split("--layout ")[1].split()[0] for c in calls] == ["nn", "nt", "nt"]
    assert [c.split("--shapes ")[1].split()[0] for c in calls] == ["grid", "bench/grid_nt_order.txt",
                                                                   "bench/model_set.txt"]
    # grid nt visits bench/search_order.py's order as written; grid nn (searched) its spread order.
    assert "--stride 7" in calls[0] and "--stride 1" in calls[1]
    assert all("--resume" in c and "--time-limit" in c for c in calls)
    # Only the model set has M buckets; its stride (11) is coprime to its 224 shapes.
    assert ["--m-buckets" in c for c in calls] == [False, False, True] and "--stride 11" in calls[2]


def test_search_all_stops_where_the_time_ran_out(tmp_path):
    # grid nt stopped at its time limit with shapes left: the model set waits for the next call.
    calls = _run(tmp_path, stop_at="nt")
    assert [c.split("--layout ")[1].split()[0] for c in calls] == ["nn", "nt"]


def test_grid_nn2_searches_the_nn_grid_again_in_its_own_store(tmp_path):
    """SET=grid-nn2: the nn grid with today's families, resumable in run/grid_nn2.db (grid.db's
    search log would skip every nn shape), its policy starting from grid.db's, filing into the
    one registry."""
    (call,) = _run(tmp_path, "none", ("search", "300", "cost:4"), {"SET": "grid-nn2"})
    assert "--layout nn" in call and "--shapes bench/grid_nn2_order.txt" in call and "--stride 1" in call
    assert "--resume" in call
    assert "--store run/grid_nn2.db" in call and "--registry run/registry" in call
    assert "--init-policy run/grid.db.ckpt/policy.pt" in call and "--seed-list cost:4" in call
    assert "--lead-specs bench/grid_nn2_leads.txt" in call          # the nt search's winner first


def test_models_decode_searches_the_decode_shapes_again_in_its_own_store(tmp_path):
    """SET=models-decode: the model set's M <= 32 shapes again (models' store finished them and
    --resume would skip them), with M buckets as the model set, filing into the one registry."""
    (call,) = _run(tmp_path, "none", ("search", "300", "cost:4"), {"SET": "models-decode"})
    assert "--layout nt" in call and "--shapes bench/model_decode_set.txt" in call
    assert "--store run/models_decode.db" in call and "--registry run/registry" in call
    assert "--m-buckets" in call and "--resume" in call and "--seed-list cost:4" in call
    assert "--init-policy run/grid.db.ckpt/policy.pt" in call


def test_another_card_searches_in_stores_of_its_own_with_the_h200_policy_as_prior(tmp_path):
    """On an H100 (what the device service lends when no H200 comes) the leads pass starts from that
    card's committed stores or none, never the H200's (--resume would skip what the H200 finished and
    the store would mix two cards' times), with the H200 search's policy as the prior; run/.card
    says whose state run/ is, so the pack that comes back is adopted under that card."""
    (call,) = _run(tmp_path, "none", ("search", "300"), {"SET": "grid-nn-leads"}, card="h100-sm90")
    assert "--store run/grid_nn_leads.db" in call and "--registry run/registry" in call
    assert "--init-policy run/prior/run/grid.db.ckpt/policy.pt" in call
    assert (tmp_path / "w" / "run" / ".card").read_text().strip() == "h100-sm90"
    out = _run.result.stdout
    assert "run/ for h100-sm90 from bench/results/h100-sm90/grid_search" in out


@pytest.mark.parametrize("held", ["h200-sm90", ""])
def test_a_card_refuses_to_go_on_from_another_cards_search_state(tmp_path, held):
    calls = _run(tmp_path, "none", ("search", "300"), {"SET": "grid-nn-leads"}, card="h100-sm90", held=held)
    assert calls == [] and _run.result.returncode == 3
    assert "holds the search state of h200-sm90 and this card is h100-sm90" in _run.result.stdout
    # the same state on its own card goes on
    calls = _run(tmp_path / "again", "none", ("search", "300"), {"SET": "grid-nn-leads"}, held=held)
    assert len(calls) == 1 and "--init-policy run/grid.db.ckpt/policy.pt" in calls[0]
