"""Where a wgmma kernel that does not finish is waiting: each CTA's producer thread and each consumer
warpgroup's first thread write their last step into pinned host memory (mapped: the host reads it
while the kernel still runs), the host waits, reads, prints and exits without a sync.

  source bench/device_env.sh
  python3 bench/hang_probe.py --spec "<wgmma spec text>" --shape 512x512x512:nt [--wait 3] [--out DIR]

The probe is text patched into the rendered source (a debugging tool: never a filed kernel) at the
producer's empty-slot wait, the consumers' full-slot wait and the end of each unit's epilogue. A
record per (CTA, role): the step (11/12 producer before / after its wait; 1/2 consumer before /
after its wait; 7 a unit stored), its arguments (unit, k-tile, slot, parity) and how many steps it
took. Built for the K-shared consumers (2026-12-06, runs 107-108; commit 736c061 has them).
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

PROBE = r"""
__device__ unsigned long long cudal2_hang_ptr;
// role 0 the producer thread, 1 + c consumer warpgroup c's first thread
DEVI void hp(int role, int step, int a, int b, int c, int d) {
    if (threadIdx.x % 128 != 0 || !cudal2_hang_ptr) return;
    volatile unsigned* p = (volatile unsigned*)cudal2_hang_ptr + (blockIdx.x * 3 + role) * 8;
    p[0] = step; p[1] = a; p[2] = b; p[3] = c; p[4] = d; p[5] = p[5] + 1;
    __threadfence_system();
}
"""

# (anchor in wgmma.cu's text, code before it, code after it)
PATCHES = [
    ("DEVI void ring_advance(", PROBE, ""),
    ("    mbar_wait(empty0 + 8 * s, phase ^ 1);\n", "    hp(0, 11, tm, kt, s, phase);\n", "    hp(0, 12, tm, kt, s, phase);\n"),
    ("                mbar_wait(full0 + 8 * s, phase);\n", "                hp(1 + c, 1, u, kt, s, phase);\n",
     "                hp(1 + c, 2, u, kt, s, phase);\n"),
    ("            TL(TL_STORE, tig == 0 && c == 0 && u == cid);\n", "", "            hp(1 + c, 7, u, 0, 0, 0);\n"),
]


def patch(src: str) -> str:
    for anchor, before, after in PATCHES:
        if anchor not in src:
            continue                     # an anchor the template no longer has: probe without it
        src = src.replace(anchor, before + anchor + after)
    return src


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--spec", required=True)
    ap.add_argument("--shape", default="512x512x512:nt")
    ap.add_argument("--wait", type=float, default=3.0, help="seconds before reading the records")
    ap.add_argument("--out", default="")
    args = ap.parse_args(argv)
    import torch

    from cudal2.backends.cuda import BACKEND
    from cudal2.backends.driver import check, drv
    from cudal2.device import current
    from cudal2.problems import Problem
    from cudal2.spec import KernelSpec, validate
    dev = current()
    p = Problem.parse(args.shape)
    spec = validate(KernelSpec.parse(args.spec), p, dev)
    kernel = BACKEND.load(BACKEND.compile_source(spec, patch(BACKEND.render(spec, p)), dev.arch, p.layout))
    d = drv()
    ptr, _size = check(d.cuModuleGetGlobal(kernel.module, b"cudal2_hang_ptr"), "cuModuleGetGlobal")
    grid = kernel._grid_wgmma(p.M, p.N)
    host = torch.zeros(grid * 3 * 8, dtype=torch.int32, pin_memory=True)
    val = torch.tensor([host.data_ptr()], dtype=torch.int64)
    check(d.cuMemcpyHtoD(ptr, val.data_ptr(), 8), "cuMemcpyHtoD")
    a = torch.randn(p.M, p.K, dtype=torch.float16, device="cuda")
    b = torch.randn(*((p.N, p.K) if p.layout == "nt" else (p.K, p.N)), dtype=torch.float16, device="cuda")
    c = torch.empty(p.M, p.N, dtype=torch.float16, device="cuda")
    torch.cuda.synchronize()
    kernel(a, b, c)
    ev = torch.cuda.Event()
    ev.record()
    time.sleep(args.wait)
    done = ev.query()
    rec = host.view(grid, 3, 8)[:, :, :6].tolist()
    roles = ("producer", "consumer0", "consumer1")
    lines = [f"{spec.text} {p.text} grid {grid}: {'finished' if done else 'NOT FINISHED after %.1f s' % args.wait}"]
    for cta in range(grid):
        lines.append(f"cta {cta}: " + " | ".join(f"{roles[r]} step {rec[cta][r][0]} args {rec[cta][r][1:5]} "
                                                  f"n {rec[cta][r][5]}" for r in range(3)))
    print("\n".join(lines[: 1 + min(grid, 12)]), flush=True)
    if args.out:
        Path(args.out).mkdir(parents=True, exist_ok=True)
        (Path(args.out) / "hang_probe.txt").write_text("\n".join(lines) + "\n")
        (Path(args.out) / "hang_probe_source.cu").write_text(patch(BACKEND.render(spec, p)))
    sys.stdout.flush()
    os._exit(0 if done else 1)       # a kernel that never finishes: no sync, no teardown


if __name__ == "__main__":
    sys.exit(main())
