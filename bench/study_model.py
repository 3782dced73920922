"""The study's cost model (bench/efficiency.py).

`CostModel` turns the figures of the partial H200 run (bench/efficiency.py's docstring) into seconds
of device wall time per evaluator call; `--synthetic` (bench/search_efficiency.py) charges it for
every call on the stub clock (cudal2.testing.stub_clocks.StudyStubClock).
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass



# ---- the cost model ------------------------------------------------------------------------------------
@dataclass
class CostModel:
    """Seconds of device wall time per evaluator call, from the partial H200 run (module docstring).

    compile   sum of per-spec CPU seconds (cuda / triton) / min(n, workers) + the slowest one's tail;
              specs compiled ahead (prefetch) cost nothing here (they ran while the GPU worked)
    check     per candidate that reaches the checker: base (cuda / triton) + an extra where the
              checks include edges (Triton: a JIT compile per edge specialisation in the GPU worker)
    time      per timed function (candidates that passed + the baselines that serve the layout):
              (warmup + 3 probe + n) x max(host_us, t) with n = max(min_calls, 1.1 min_ms / t)
    prepare   per problem switch (inputs drawn on the GPU, reference, baselines checked)
    group     the policy's sampling and GRPO step per group (train and policy calls)
    """
    start_s: float = 30.0             # python + torch imports, GPU worker start, pools' first imports
    finish_s: float = 5.0             # closing the worker and pools, writing the outputs
    workers: int = 16
    compile_cuda_s: float = 1.0
    compile_triton_s: float = 1.5
    compile_tail_s: float = 0.5
    check_cuda_s: float = 0.05
    check_triton_s: float = 0.25
    edges_cuda_s: float = 0.05
    edges_triton_s: float = 1.3
    host_us: float = 42.0
    min_kernel_us: float = 5.0        # no H200 GEMM runs faster (64^3: 5.1 us); the stub clock's can
    prepare_s: float = 1.0
    call_s_fixed: float = 0.2         # IPC, synchronisation, the store's transaction
    group_s: float = 0.3
    baselines: int = 4                # of the five, the ones serving one layout (cublas-nn xor -tn)

    def _fn_s(self, t_us: float, conf: dict) -> float:
        t = max(float(t_us or 0.0), self.min_kernel_us)
        n = max(int(conf.get("min_calls", 30)), math.ceil(1.1 * float(conf.get("min_ms", 100.0)) * 1000.0 / t))
        return (int(conf.get("warmup", 3)) + 3 + n) * max(self.host_us, t) * 1e-6

    def call_s(self, problem: Problem, ms: list[Measurement], conf: dict, *, switched: bool, ahead: int = 0,
               group_step: bool = False) -> float:
        fresh = [m for m in ms if m.status != "invalid" and not m.reason.startswith("duplicate binary")]
        tri = [m.spec.startswith("backend=triton") for m in fresh]
        cpu = sum(self.compile_triton_s if t else self.compile_cuda_s for t in tri)
        n_c = max(len(fresh) - ahead, 0)
        cpu *= n_c / max(len(fresh), 1)
        compile_s = (cpu / min(n_c, self.workers) + self.compile_tail_s) if n_c else 0.0
        edges = "edges" in conf.get("checks", ())
        checked = [t for m, t in zip(fresh, tri) if m.status != "compile_error"]
        check_s = sum((self.check_triton_s + (self.edges_triton_s if edges else 0.0)) if t
                      else (self.check_cuda_s + (self.edges_cuda_s if edges else 0.0)) for t in checked)
        ok = [m for m in fresh if m.status == "ok" and m.time_us]
        base_us = next((m.best_cublas_us for m in ms if m.best_cublas_us), None) or (problem.flops / 7e8 + 4.0)
        time_s = 0.0
        if ok:
            time_s = sum(self._fn_s(m.time_us, conf) for m in ok) + self.baselines * self._fn_s(base_us, conf)
        return (self.prepare_s if switched else 0.0) + compile_s + check_s + time_s + self.call_s_fixed \
            + (self.group_s if group_step else 0.0)

    def to_dict(self) -> dict:
        return asdict(self)
