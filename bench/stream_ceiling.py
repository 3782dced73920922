"""Issue 20's ceiling: how fast the card moves bytes one way, beside the copy PROTOCOL's BW is.

A decode GEMM at M <= 16 reads its weight once and writes almost nothing, so its limit is the
card's read bandwidth, while PROTOCOL's BW (and issue 20's "85% of a measured device copy") is a
copy's, reads and writes together. On the H200 cuBLAS streams the 117-136 MB decode weights at
3.5-3.65 TB/s (run 68, ~0.85 of the 4.23 TB/s copy) and our kernels tie it there: whether any
kernel can do better is the read rate, measured here, not assumed.

Per buffer size, on the PROTOCOL clock (cudal2.timing: offline back to back, and server with L2
wiped before each call), the bytes each op moves over its GPU time:
  copy   dst.copy_(src), counting read + write (PROTOCOL's BW at 1 GiB)
  read   reads only, the fastest of: a Triton kernel that XORs the buffer as int32 words (each
         program XORs ITERS blocks of BLOCK words and stores one word) over a few (BLOCK, ITERS,
         warps), and the CUDA readers of bench/stream_cuda.py (TMA bulk copies into shared memory,
         16-byte loads); the best of each kind is kept beside it (read_triton_us, read_bulk_us,
         read_ldg_us: the Triton kernel alone made the floor until 2026-12-05)
  sum    torch.sum(x, dtype=float32): the library's read path, for comparison
  write  writes only, the fastest of x.zero_() and the CUDA writers of bench/stream_cuda.py (TMA
         bulk stores from shared memory, 16-byte stores), the best of each kind kept beside it
         (write_torch_us, write_bulk_us, write_stg_us; x.zero_() alone until 2026-12-05)
Also `empty`: a kernel that does nothing (the launch cost on this clock), so a kernel's fixed cost
can be told from its streaming rate.

  source bench/device_env.sh
  python3 bench/stream_ceiling.py --out $OUT [--mb 8,16,32,48,64,117,136,256,1024] [--min-ms 20]

Writes stream_ceiling_<device>_<commit>.csv / .json / .md (card, commit, command in each) and prints the table.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))      # stream_cuda (bench/ is not a package)

# (BLOCK int32 words per iteration, ITERS, warps): one program streams BLOCK * ITERS * 4 bytes.
# A few shapes of work per program; the fastest per size is reported (with its config), since
# the question is what the card allows, not what one config gets.
READ_CONFIGS = ((2048, 8, 4), (4096, 4, 8), (4096, 16, 8), (8192, 4, 8))
# 16 and 48 (since 2026-12-05): the skinny grid shapes hold 17-70 MB, which stay in L2 between
# offline calls; bench/class_ceiling.py interpolates between these sizes.
DEFAULT_MB = (8, 16, 32, 48, 64, 117, 136, 256, 1024)

_kernel = None


def read_kernel():
    """The Triton read kernel, built on first use (Triton chooses interpreted or compiled functions
    when @triton.jit runs, so a test can import this module before setting TRITON_INTERPRET)."""
    global _kernel
    if _kernel is None:
        import triton
        import triton.language as tl

        @triton.jit
        def xor_read(x_ptr, out_ptr, n, BLOCK: tl.constexpr, ITERS: tl.constexpr):
            pid = tl.program_id(0)
            base = pid.to(tl.int64) * BLOCK * ITERS
            acc = tl.zeros([BLOCK], dtype=tl.int32)
            for i in range(ITERS):
                offs = base + i * BLOCK + tl.arange(0, BLOCK)
                acc ^= tl.load(x_ptr + offs, mask=offs < n, other=0)
            # One word per program: every load feeds the result, so none can be dropped.
            tl.store(out_ptr + pid, tl.xor_sum(acc, 0))

        _kernel = xor_read
    return _kernel


def read_fn(words, out, block: int, iters: int, warps: int):
    """A callable that XOR-reads `words` (int32, contiguous) into out[program]."""
    k, n = read_kernel(), words.numel()
    grid = (-(-n // (block * iters)),)
    if out.numel() < grid[0]:
        raise ValueError(f"out holds {out.numel()} words; the grid has {grid[0]} programs")
    return lambda: k[grid](words, out, n, BLOCK=block, ITERS=iters, num_warps=warps)


def xor_reference(w, block: int, iters: int):
    """What read_fn stores, computed on the host from the words as a numpy int32 array: each
    program's XOR of its chunk."""
    import numpy as np
    per = block * iters
    pad = (-len(w)) % per
    w = np.concatenate([w, np.zeros(pad, dtype=np.int32)]).reshape(-1, per)
    return np.bitwise_xor.reduce(w, axis=1)


def rates(times_us: dict[str, float], nbytes: int) -> dict[str, float]:
    """op -> TB/s: bytes the op moves (copy: read + write, 2 x the buffer) over its time."""
    moved = {"copy": 2 * nbytes, "read": nbytes, "sum": nbytes, "write": nbytes}
    return {op: moved[op] / (t * 1e-6) / 1e12 for op, t in times_us.items() if op in moved and t}


def measure(mb: list[int], min_ms: float, server_calls: int) -> tuple[list[dict], float]:
    import numpy as np
    import torch

    import stream_cuda
    from cudal2 import timing
    from cudal2.device import current
    rows = []
    empty = timing.offline({"empty": lambda: torch.cuda._sleep(0)}, min_calls=200, min_ms=5.0)["empty"].median_us
    streams = stream_cuda.Streams(stream_cuda.compile_streams(), current().sm_count)
    cuda_out = torch.empty(max(streams.grid(c) for c in stream_cuda.READERS), device="cuda", dtype=torch.int32)
    for size in mb:
        n = size * (1 << 20) // 2                      # fp16 elements
        src = torch.randn(n, device="cuda", dtype=torch.float16)
        dst = torch.empty_like(src)
        words = src.view(torch.int32)
        out = torch.empty(-(-words.numel() // min(b * i for b, i, _ in READ_CONFIGS)), device="cuda",
                          dtype=torch.int32)
        # Every read kernel is checked before it is timed: the Triton one by each program's XOR, the
        # CUDA ones (stream_cuda.py) by the XOR of all the buffer's words.
        host = words.cpu().numpy()
        for block, iters, warps in READ_CONFIGS:
            read_fn(words, out, block, iters, warps)()
            torch.cuda.synchronize()
            progs = -(-words.numel() // (block * iters))
            if not np.array_equal(out[:progs].cpu().numpy(), xor_reference(host, block, iters)):
                raise SystemExit(f"read kernel {block}x{iters} w{warps}: wrong XOR at {size} MB")
        want = stream_cuda.xor_all(host)      # the host copy as it is (no second GiB)
        for name in stream_cuda.READERS:
            if not streams.check_read(name, src, cuda_out, want):
                raise SystemExit(f"read kernel {name}: wrong XOR at {size} MB")
        for name in stream_cuda.WRITERS:
            if not streams.check_write(name, dst):
                raise SystemExit(f"write kernel {name}: wrong words at {size} MB")
        del host
        fns = {f"read {b}x{i} w{w}": read_fn(words, out, b, i, w) for b, i, w in READ_CONFIGS}
        fns.update({f"read {name}": streams.fn(name, src, cuda_out) for name in stream_cuda.READERS})
        fns.update({f"write {name}": streams.fn(name, dst) for name in stream_cuda.WRITERS})
        fns.update({"copy": lambda: dst.copy_(src), "sum": lambda: torch.sum(src, dtype=torch.float32),
                    "write": lambda: dst.zero_()})
        for mode in ("offline", "server"):
            st = timing.offline(fns, min_calls=30, min_ms=min_ms) if mode == "offline" else \
                timing.server(fns, calls=server_calls)
            key = "median_us" if mode == "offline" else "mean_us"
            t = {name: getattr(s, key) for name, s in st.items()}
            reads = {name: v for name, v in t.items() if name.startswith("read ")}
            writes = {name: v for name, v in t.items() if name == "write" or name.startswith("write ")}
            best_cfg, best_w = min(reads, key=reads.get), min(writes, key=writes.get)
            times = {"copy": t["copy"], "read": reads[best_cfg], "sum": t["sum"], "write": writes[best_w]}
            row = {"mb": size, "bytes": n * 2, "mode": mode, "read_config": best_cfg[5:],
                   "write_config": best_w[6:] or "zero_"}
            row.update({f"{op}_us": round(v, 3) for op, v in times.items()})
            row.update({f"{op}_tbs": round(v, 3) for op, v in rates(times, n * 2).items()})
            row["read_over_copy"] = round(row["read_tbs"] / row["copy_tbs"], 3)
            # the best of each way of reading and of writing, beside the best of all
            for kind in READ_KINDS:
                row[f"read_{kind}_us"] = round(min(v for k, v in reads.items() if read_kind(k) == kind), 3)
            for kind in WRITE_KINDS:
                row[f"write_{kind}_us"] = round(min(v for k, v in writes.items() if write_kind(k) == kind), 3)
            rows.append(row)
        del src, dst, words, out
        torch.cuda.empty_cache()
    return rows, empty


READ_KINDS = ("triton", "bulk", "ldg")
WRITE_KINDS = ("torch", "bulk", "stg")


def read_kind(name: str) -> str:
    """Which way a timed read config ("read 4096x4 w8", "read bulk 16K x8", "read ldg x4 t512") reads."""
    word = name.split()[1]
    return word if word in ("bulk", "ldg") else "triton"


def write_kind(name: str) -> str:
    """Which way a timed write ("write": x.zero_(), "write bulk 16K x4", "write stg x4 t512") writes."""
    return name.split()[1] if name != "write" else "torch"


def markdown(rows: list[dict], empty_us: float, card: str, commit: str, command: str) -> str:
    out = [f"# Streaming ceiling on {card} (commit {commit})", "", f"    {command}", "",
           f"An empty kernel on this clock: {empty_us:.2f} µs (offline median). TB/s = bytes moved / GPU "
           "time (copy counts read + write).", "",
           "| MB | mode | copy TB/s | read TB/s (config) | read TB/s: Triton / bulk / ldg | torch.sum TB/s "
           "| write TB/s (config) | write TB/s: zero_ / bulk / stg | read / copy |",
           "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]

    def kinds(r, op, names):
        return " / ".join(f"{r['bytes'] / (r[f'{op}_{k}_us'] * 1e-6) / 1e12:.2f}" if r.get(f"{op}_{k}_us") else "-"
                          for k in names)
    for r in rows:
        wcfg = f" ({r['write_config']})" if r.get("write_config") else ""
        out.append(f"| {r['mb']} | {r['mode']} | {r['copy_tbs']:.2f} | {r['read_tbs']:.2f} ({r['read_config']}) | "
                   f"{kinds(r, 'read', READ_KINDS)} | {r['sum_tbs']:.2f} | {r['write_tbs']:.2f}{wcfg} | "
                   f"{kinds(r, 'write', WRITE_KINDS)} | {r['read_over_copy']:.2f} |")
    return "\n".join(out) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--mb", default=",".join(map(str, DEFAULT_MB)), help="buffer sizes in MiB, comma separated")
    ap.add_argument("--min-ms", type=float, default=20.0, help="offline: at least this much GPU time per op")
    ap.add_argument("--server-calls", type=int, default=20)
    args = ap.parse_args(argv)
    try:
        mb = [int(x) for x in args.mb.split(",") if x.strip()]
    except ValueError:
        ap.error(f"--mb {args.mb!r}: expected integers (MiB), comma separated")
    if not mb or min(mb) < 1:
        ap.error("--mb: at least one size of 1 MiB or more")
    import torch
    if not torch.cuda.is_available():
        print("error: no CUDA GPU: stream_ceiling measures the card", file=sys.stderr)
        return 3
    from cudal2.device import current
    from cudal2.report import write_rows_csv
    from cudal2.versions import collect, source_commit
    commit, card, key = source_commit(), torch.cuda.get_device_name(), current().key
    command = "python3 bench/stream_ceiling.py " + " ".join(argv if argv is not None else sys.argv[1:])
    rows, empty = measure(mb, args.min_ms, args.server_calls)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    stem = out / f"stream_ceiling_{key}_{commit}"
    write_rows_csv(stem.with_suffix(".csv"), rows, [command, f"card {card} device {key} commit {commit} "
                                                   f"empty_us {empty:.3f}"])
    stem.with_suffix(".json").write_text(json.dumps({"card": card, "device": key, "commit": commit,
                                                     "command": command, "versions": collect(),
                                                     "empty_us": empty, "rows": rows}, indent=1) + "\n")
    md = markdown(rows, empty, card, commit, command)
    stem.with_suffix(".md").write_text(md)
    print(md)
    return 0


if __name__ == "__main__":
    sys.exit(main())
