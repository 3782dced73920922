"""Dispatch where cuBLAS won (cudal2.lt_dispatch) on the CPU: which measured cuBLAS call runs, the
autotune cache read into registry entries (`cudal2 registry attach-lt`), and ops' use of it with a
stand-in kernel. The launches themselves are in tests/test_lt_dispatch_gpu.py."""
import dataclasses
import json

import pytest
import torch
from typer.testing import CliRunner

from cudal2 import lt_dispatch, ops, plans
from cudal2.cli import app
from cudal2.problems import Problem
from cudal2.registry import Entry, Registry, RegistryError

DEV = "h200-sm90"
WORDS = [1, 2, 3, 4, 5, 6, 7, 2**64 - 1]
V = 130100


def cub(problem="512x512x4096:nn", lt_algo=None, **times):
    return Entry(problem=problem, device=DEV, backend="cublas", time_us=min(times.values()) if times else None,
                 best_cublas_us=min(times.values()) if times else None, baselines_us=times, lt_algo=lt_algo)


def test_choose_runs_the_fastest_measured_call_it_can():
    e = cub(lt_algo={"data": WORDS, "cublasLt": V}, torch=12.0, **{"cublas-nn": 11.0,
            "cublaslt-heuristic": 11.5, "cublaslt-autotune": 9.0})
    assert lt_dispatch.choose(e, V)[:2] == ("cublaslt-autotune", WORDS)
    # Another cuBLASLt version: the stored words mean nothing to it; the next fastest runnable wins.
    # cublas-nn (11.0) is faster still but is not a dispatch target (torch.matmul is cuBLAS already).
    target, words, why = lt_dispatch.choose(e, V + 1)
    assert (target, words) == ("cublaslt-heuristic", None)
    assert f"for cuBLASLt {V}, not {V + 1}" in why
    target, words, why = lt_dispatch.choose(e, None)          # no nvmath-python here
    assert (target, words) == ("torch", None) and "no cuBLASLt here" in why


def test_choose_without_stored_algorithm_or_times():
    e = cub(torch=10.0, **{"cublaslt-heuristic": 10.5, "cublaslt-autotune": 8.0})
    target, _, why = lt_dispatch.choose(e, V)
    assert target == "torch" and "not stored" in why          # heuristic 10.5 loses to torch 10.0
    assert lt_dispatch.choose(cub(), V)[0] == "torch"          # nothing measured: torch


def test_entry_refuses_malformed_lt_algo():
    with pytest.raises(RegistryError, match="lt_algo"):
        cub(lt_algo={"data": WORDS[:7], "cublasLt": V}, torch=1.0).validate()
    with pytest.raises(RegistryError, match="lt_algo"):
        cub(lt_algo={"data": WORDS[:7] + [2**64], "cublasLt": V}, torch=1.0).validate()
    spec = "backend=triton family=tiled bm=64 bn=64 bk=64 warps=4 stages=4 group_m=8"
    with pytest.raises(RegistryError, match="lt_algo"):
        Entry(problem="64x64x64:nn", device=DEV, backend="triton", spec=spec, source="kernels_triton/generated/x/y.py",
              sha256="0" * 64, lt_algo={"data": WORDS, "cublasLt": V}).validate()


def write_cache(tmp_path, rows, name=f"lt-autotune-{DEV}.json"):
    p = tmp_path / name
    p.write_text(json.dumps({k: {"algo": w, "median_us": 1.0, "rank": 0, "candidates": 3, "calls": 5}
                             for k, w in rows.items()}))
    return p


def test_read_tune_cache_keeps_the_newest_version(tmp_path):
    p = write_cache(tmp_path, {f"64x64x64:nn|cublasLt{V}": WORDS, f"64x64x64:nn|cublasLt{V + 5}": WORDS[::-1],
                               f"64x128x64:nt|cublasLt{V}": WORDS})
    dev, algos = lt_dispatch.read_tune_cache(p)
    assert dev == DEV
    assert algos == {"64x64x64:nn": {"data": WORDS[::-1], "cublasLt": V + 5},
                     "64x128x64:nt": {"data": WORDS, "cublasLt": V}}
    with pytest.raises(ValueError, match="not an autotune cache"):
        lt_dispatch.read_tune_cache(tmp_path / "other.json")
    bad = write_cache(tmp_path, {"64x64x64:nn|cublasLtX": WORDS}, name="lt-autotune-d.json")
    with pytest.raises(ValueError, match="not a tuned algorithm"):
        lt_dispatch.read_tune_cache(bad)


def test_attach_lt_cli_updates_cublas_entries_only(tmp_path):
    root = tmp_path / "reg"
    reg = Registry.load(root, create=True)
    reg.add(cub("64x64x64:nn", torch=2.0, **{"cublaslt-autotune": 1.5}), None)
    reg.add(cub("128x64x64:nn", torch=2.0), None)
    spec = "backend=triton family=tiled bm=64 bn=64 bk=64 warps=4 stages=4 group_m=8"
    reg.add(Entry(problem="64x128x64:nt", device=DEV, backend="triton", spec=spec, time_us=1.0,
                  best_cublas_us=2.0), "# kernel\n")
    cache = write_cache(tmp_path, {f"64x64x64:nn|cublasLt{V}": WORDS, f"64x128x64:nt|cublasLt{V}": WORDS})
    r = CliRunner().invoke(app, ["registry", "attach-lt", str(cache), "--registry", str(root)])
    assert r.exit_code == 0, r.output
    assert "1 cublas entries updated, 1 of 2 now carry one" in r.output
    fresh = Registry.load(root)
    got = {e.problem: e.lt_algo for e in fresh.all(DEV)}
    assert got == {"64x64x64:nn": {"data": WORDS, "cublasLt": V}, "128x64x64:nn": None, "64x128x64:nt": None}
    r = CliRunner().invoke(app, ["registry", "attach-lt", str(tmp_path / "nope.json"), "--registry", str(root)])
    assert r.exit_code == 1 and "not an autotune cache" in r.output


def test_attach_lt_skips_entries_whose_dispatch_cannot_run_autotune(tmp_path):
    """A dispatch record that qualifies only torch.matmul never runs the stored algorithm: no
    attach (it would only churn the index); one that qualifies autotune's call gets it."""
    root = tmp_path / "reg"
    reg = Registry.load(root, create=True)
    rec = {"target": "torch", "why": "no call beat torch.matmul", "qualified": ["torch"]}
    reg.add(Entry(problem="64x64x64:nn", device=DEV, backend="cublas", time_us=2.0, best_cublas_us=2.0,
                  baselines_us={"torch": 2.0, "cublaslt-autotune": 2.02}, dispatch=rec), None)
    rec2 = {"target": "cublaslt-autotune", "why": "1.2x in 2 of 2", "qualified": ["cublaslt-autotune", "torch"]}
    reg.add(Entry(problem="128x64x64:nn", device=DEV, backend="cublas", time_us=1.5, best_cublas_us=1.5,
                  baselines_us={"torch": 1.8, "cublaslt-autotune": 1.5}, dispatch=rec2), None)
    cache = write_cache(tmp_path, {f"64x64x64:nn|cublasLt{V}": WORDS, f"128x64x64:nn|cublasLt{V}": WORDS})
    r = CliRunner().invoke(app, ["registry", "attach-lt", str(cache), "--registry", str(root)])
    assert r.exit_code == 0 and "1 cublas entries updated" in r.output, r.output
    got = {e.problem: e.lt_algo for e in Registry.load(root).all(DEV)}
    assert got == {"64x64x64:nn": None, "128x64x64:nn": {"data": WORDS, "cublasLt": V}}
    assert lt_dispatch.choose(Registry.load(root).lookup(Problem.parse("128x64x64:nn"), DEV), V)[:2] == \
        ("cublaslt-autotune", WORDS)


class _LtStandIn:
    def __init__(self, problem, words):
        self.problem, self.words = problem, words

    def supports(self, p):
        return p == self.problem

    def bind(self, M, N, K):
        return lambda a, b, c: c.copy_((a.float() @ b.float()).half())


def test_ops_dispatches_exact_cublas_entry_to_the_winning_call(tmp_path, hopper, monkeypatch):
    reg = Registry.load(tmp_path)
    reg.add(cub("128x128x256:nn", lt_algo={"data": WORDS, "cublasLt": V}, torch=3.0,
                **{"cublaslt-autotune": 2.0}), None)
    ops.set_registry(tmp_path)
    dev = dataclasses.replace(hopper, name="NVIDIA H200", sm_count=1)
    monkeypatch.setattr(lt_dispatch, "lt_version", lambda: V)
    monkeypatch.setattr(lt_dispatch, "LtKernel", _LtStandIn)
    try:
        kern, info = ops._choose(Problem(128, 128, 256), dev, 0, strict=False)
        assert isinstance(kern, _LtStandIn) and kern.words == WORDS
        assert info.startswith(f"cublaslt-autotune: cublas won {DEV}/128x128x256:nn")
        # Another size near it has no entry: torch.matmul (its algorithm was tuned for 256, not 384).
        kern, info = ops._choose(Problem(128, 128, 384), dev, 0, strict=False)
        assert kern is None and info.startswith("torch: no registry entry for 128x128x384:nn")
        # A neighbour's entry handed in directly still goes to torch, never to its algorithm.
        e = Registry.load(tmp_path).lookup(Problem(128, 128, 256), DEV)
        assert ops._cublas_choice(Registry.load(tmp_path), e, Problem(128, 128, 384), 0)[0] is None
        plan = plans.kernel_plan(_LtStandIn(Problem(8, 8, 8), WORDS), 8, 8, 8, torch.Size((8, 8)),
                                torch.device("cpu"), "")
        a, b = torch.randn(8, 8).half(), torch.randn(8, 8).half()
        assert torch.equal(plan(a, b, None), (a.float() @ b.float()).half())

        def broken(problem, words):
            raise RuntimeError("CUBLAS_STATUS_NOT_SUPPORTED")
        ops.clear_cache()
        monkeypatch.setattr(lt_dispatch, "LtKernel", broken)
        with pytest.warns(RuntimeWarning, match="cublaslt-autotune for .* failed to set up .*NOT_SUPPORTED"):
            kern, info = ops._choose(Problem(128, 128, 256), dev, 0, strict=False)
        assert kern is None and info.startswith("torch: cublas won 128x128x256:nn, cublaslt-autotune failed")
    finally:
        ops.set_registry(None)


@pytest.mark.parametrize("kernel_us, backend", [(3.0, "cublas"), (1.0, "triton")])
def test_record_winner_keeps_lt_algo_only_where_cublas_won(tmp_path, kernel_us, backend):
    from cudal2.registry import record_winner
    spec = "backend=triton family=tiled bm=64 bn=64 bk=64 warps=4 stages=4 group_m=8"
    m = {"status": "ok", "check": {"passed": True}, "problem": "64x64x64:nn", "spec": spec, "time_us": kernel_us,
         "best_cublas_us": 2.0, "baselines_us": {"torch": 2.5, "cublaslt-autotune": 2.0}}
    algo = {"data": WORDS, "cublasLt": V}
    e = record_winner(tmp_path, m, "# kernel\n", DEV, lt_algo=algo)
    assert e.backend == backend and e.lt_algo == (algo if backend == "cublas" else None)
    assert Registry.load(tmp_path).lookup(Problem.parse("64x64x64:nn"), DEV).lt_algo == e.lt_algo
