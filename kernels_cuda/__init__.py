"""CUDA C++ templates of the cudal2 CUDA backend and the renderer that fills in a spec's knobs.

`render(spec, layout)` returns one self-contained translation unit: a `#define` preamble with the
spec's knobs, common.cuh, for the wgmma family hopper.cuh (its PTX wrappers) and a generated wgmma
wrapper (one inline-asm statement with BN/2 accumulator operands, too long to write by hand for
every width), for the others pdl.cuh (their programmatic-dependent-launch macro), then the
family's .cu.
No #include: NVRTC compiles it with no CUDA headers, so a CPU-only machine needs only the wheel.
"""
from __future__ import annotations

from importlib import resources

from ..spec import KernelSpec, mma_warp_layout

# Entry points per family; the first is the main kernel whose resources are reported.
KERNELS = {
    "mma": ("cudal2_mma_vec", "cudal2_mma_scalar", "cudal2_splitk_reduce"),
    "wgmma": ("cudal2_wgmma",),
    "stream": ("cudal2_stream_b", "cudal2_stream_a"),
}


def _read(name: str) -> str:
    return resources.files(__name__).joinpath(name).read_text()


def _wgmma_wrapper(n: int) -> str:
    """`wgmma_bn<TRANS_B>(d, descA, descB, scale_d)`: d[n/2] = A(64x16) * B(16xn) + scale_d * d."""
    regs = n // 2
    outs = ", ".join(f"%{i}" for i in range(regs))
    cons = ", ".join(f'"+f"(d[{i}])' for i in range(regs))
    a, b = regs, regs + 1
    return (
        f"template <int TRANS_B>  // m64n{n}k16\n"
        "DEVI void wgmma_bn(float* d, u64 da, u64 db, int scale_d) {\n"
        "    asm volatile(\"{\\n.reg .pred p;\\n\"\n"
        f"        \"setp.ne.b32 p, %{a + 2}, 0;\\n\"\n"
        f"        \"wgmma.mma_async.sync.aligned.m64n{n}k16.f32.f16.f16 \"\n"
        f"        \"{{{outs}}}, \"\n"
        f"        \"%{a}, %{b}, p, 1, 1, 0, %{b + 2};\\n\"\n"
        "        \"}\\n\"\n"
        f"        : {cons}\n"
        '        : "l"(da), "l"(db), "r"(scale_d), "n"(TRANS_B));\n'
        "}\n"
    )


def defines(spec: KernelSpec, layout: str) -> dict[str, int]:
    d = {"BM": spec.bm, "BN": spec.bn, "BK": spec.bk, "WARPS": spec.warps, "STAGES": spec.stages,
         "GROUP_M": spec.group_m, "SPLIT_K": spec.split_k, "CLUSTER": spec.cluster,
         "LAYOUT_NT": int(layout == "nt")}
    if spec.family == "mma":
        d["WM"], d["WN"] = mma_warp_layout(spec.bm, spec.bn, spec.warps)
    if spec.family == "wgmma":
        d["CONSUMERS"] = spec.consumers
        d["PINGPONG"] = int(spec.pingpong)
        d["LITE"] = int(spec.warp_spec == 0)
        d["SUBTILE"] = spec.subtile
        d["EPI_COLS"] = spec.epi_cols
        d["MC_A"] = int(spec.cluster_shares_a)
        if layout == "nn":
            d["NN_COLS"] = spec.nn_b_cols
    return d


def render(spec: KernelSpec, layout: str) -> str:
    if spec.family not in KERNELS:
        raise ValueError(f"family {spec.family!r} has no CUDA template (CUDA families: {tuple(KERNELS)})")
    head = [f"// cudal2 {spec.text} layout={layout}"]
    head += [f"#define {k} {v}" for k, v in defines(spec, layout).items()]
    parts = ["\n".join(head), _read("common.cuh")]
    if spec.family == "wgmma":
        parts += [_read("hopper.cuh"), _wgmma_wrapper(spec.bn)]
    else:
        parts.append(_read("pdl.cuh"))        # wgmma.cu has its own PDL (trigger variants, default)
    parts.append(_read(f"{spec.family}.cu"))
    return "\n".join(parts)
