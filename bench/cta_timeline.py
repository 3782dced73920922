"""Where a short wgmma kernel's time goes, CTA by CTA: the kernel built with TIMELINE=1
(kernels_cuda/wgmma.cu) stamps %globaltimer (ns, one clock for the whole GPU) and %clock64 (the SM's
cycle counter) at nine events of each CTA's first work unit: entry, barriers ready, about to issue
the first load, first load issued, first k-tile landed, MMAs done, split-K reduced, TMA store issued, exit. Issue 20 asks what
the ~2 µs a skinny kernel spends over an empty one are; issue 19 whether the SM clock sags under a
long back-to-back run (the clock64 / globaltimer ratio of each CTA is its SM clock while it ran).

One device call:

  source bench/device_env.sh
  python3 bench/cta_timeline.py --out $OUT \
      --case "64x2048x4096:nt|<wgmma spec text>" [--case ...] [--cases FILE] [--before 0,200] [--repeat 3]

Per case: the instrumented kernel passes the checker's random check; the filed kernel and the
instrumented one (and, for a case with template defines such as RED_CHUNK=8, the variant built
with them) are timed together by the PROTOCOL clock (cudal2.timing.offline), so the stamps' own
cost and the variant's gain are same-run figures; then for each --before N, N launches back to
back, one stamped launch timed by CUDA events, the stamps read back. Writes
cta_timeline_<commit>.json (per case and N: every CTA's raw stamps and SM, the summary below) and
cta_timeline_<commit>.md (the table), with the card and the command.

Summary per stamped launch: launch skew (each CTA's entry after the first CTA's, median / max),
per event the time since the CTA's own entry (median, p90 and max over CTAs), the span (first
entry to last exit) beside the CUDA-event time of the same launch, and the SM clock (MHz, median
over CTAs).
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

EVENTS = ("entry", "ready", "produce", "load", "full", "mma", "reduce", "store", "exit",   # wgmma.cu's TL_*
          "partial", "summed")     # the cluster split-K's two, appended: the older events keep their slots
EXIT = EVENTS.index("exit")
MAX_CTAS = 4096                                                                # wgmma.cu's TL_MAX_CTAS
TIMELINE_DEFINE = "#define TIMELINE 1\n"
# The GPU sleep ahead of each stamped train: ~10 ms at the H200's ~1.98 GHz, longer than the host
# needs to enqueue 1000 launches (~5-10 µs each); the sleep's length is not part of any figure.
SLEEP_CYCLES = 20_000_000


def _pct(xs: list[float], q: float) -> float:
    s = sorted(xs)
    return s[min(len(s) - 1, max(0, round(q * (len(s) - 1))))]


def summarize(stamps: list[list[tuple[int, int]]], event_us: float | None = None) -> dict:
    """stamps[cta][event] = (globaltimer ns, clock64), (0, 0) where the CTA did not stamp that event
    (a slice that was not last in a workspace split-K stores nothing; CSPLIT has no TMA store).
    Times are in µs; a CTA without entry and exit stamps is left out (it never ran the instrumented
    thread's path, or the grid outgrew the buffer)."""
    ctas = [s for s in stamps if s[0][0] and s[EXIT][0]]
    if not ctas:
        raise ValueError("no CTA stamped both entry and exit: was the kernel built with TIMELINE=1?")
    t0 = min(s[0][0] for s in ctas)
    skew = [(s[0][0] - t0) / 1e3 for s in ctas]
    events = {}
    for i, name in enumerate(EVENTS[1:], start=1):
        since = [(s[i][0] - s[0][0]) / 1e3 for s in ctas if s[i][0]]
        if since:
            events[name] = {"ctas": len(since), "median_us": round(statistics.median(since), 3),
                            "p90_us": round(_pct(since, 0.9), 3), "max_us": round(max(since), 3)}
    mhz = [(s[EXIT][1] - s[0][1]) / ((s[EXIT][0] - s[0][0]) / 1e3) for s in ctas if s[EXIT][0] > s[0][0]]
    out = {"ctas": len(ctas), "skew_median_us": round(statistics.median(skew), 3),
           "skew_max_us": round(max(skew), 3),
           "span_us": round((max(s[EXIT][0] for s in ctas) - t0) / 1e3, 3),
           "sm_mhz_median": round(statistics.median(mhz), 1) if mhz else None, "events": events}
    if event_us is not None:
        out["event_us"] = round(event_us, 3)
    return out


def parse_case(text: str) -> tuple[str, str, dict[str, int]]:
    """'MxNxK:layout|spec text[|NAME=VALUE ...]' -> (problem text, spec text, defines). The defines
    are template macros of an experiment that is not a spec field yet (wgmma.cu's RED_CHUNK): the
    case then times the filed kernel beside the variant, same run."""
    parts = [x.strip() for x in text.split("|")]
    if len(parts) not in (2, 3) or not all(parts[:2]):
        raise ValueError(f"--case {text!r}: expected 'MxNxK:layout|<wgmma spec text>[|NAME=VALUE ...]'")
    return parts[0], parts[1], parse_defines(parts[2] if len(parts) == 3 else "", f"--case {text!r}")


def parse_defines(text: str, what: str) -> dict[str, int]:
    """'NAME=INT [NAME=INT ...]' (spaces or commas) -> template macros; ValueError naming `what`."""
    defines = {}
    for item in text.replace(",", " ").split():
        name, _, value = item.partition("=")
        if not name.isidentifier() or not value.lstrip("-").isdigit() or name == "TIMELINE":
            raise ValueError(f"{what}: define {item!r} is not NAME=INTEGER (TIMELINE is cta_timeline's own)")
        defines[name] = int(value)
    return defines


def prefix(defines: dict[str, int]) -> str:
    return "".join(f"#define {k} {v}\n" for k, v in defines.items())


def table(results: list[dict]) -> str:
    head = ("| shape | spec | before | event µs | span µs | skew med/max µs | MHz | "
            + " | ".join(EVENTS[1:]) + " |")
    lines = [head, "|" + " --- |" * (7 + len(EVENTS) - 1)]
    for r in results:
        for run in r.get("runs", []):
            s = run["summary"]
            ev = [f"{s['events'][e]['median_us']:.2f}" if e in s["events"] else "-" for e in EVENTS[1:]]
            spec = r["spec"] + "".join(f" {k}={v}" for k, v in r.get("defines", {}).items())
            lines.append(f"| {r['shape']} | {spec} | {run['before']} | {s.get('event_us', '-')} | "
                         f"{s['span_us']} | {s['skew_median_us']}/{s['skew_max_us']} | {s['sm_mhz_median']} | "
                         + " | ".join(ev) + " |")
    return "\n".join(lines) + "\n\nEvent columns: median over CTAs of the time since the CTA's own entry (µs).\n"


def build_variant(spec, problem, dev, head: str):
    """The wgmma kernel with `head` (#defines) ahead of its rendered source, validated, compiled
    (the backend's cache keys on the source) and loaded."""
    from cudal2.backends.cuda import BACKEND
    from cudal2.spec import validate
    validate(spec, problem, dev)
    src = head + BACKEND.render(spec, problem)
    return BACKEND.load(BACKEND.compile_source(spec, src, dev.arch, problem.layout))


class Stamped:
    """The instrumented kernel and its stamp buffer (the module's `cudal2_timeline` global)."""

    def __init__(self, spec, problem, dev, defines: dict[str, int]):
        self.kernel = build_variant(spec, problem, dev, TIMELINE_DEFINE + prefix(defines))
        from cudal2.backends.driver import check, drv
        self._d, self._check = drv(), check
        self.ptr, self.nbytes = self._global(b"cudal2_timeline")
        self.sm_ptr, self.sm_bytes = self._global(b"cudal2_timeline_sm")

    def _global(self, name: bytes) -> tuple[int, int]:
        res = self._d.cuModuleGetGlobal(self.kernel.module, name)
        ptr, size = self._check(res, f"cuModuleGetGlobal({name.decode()})")
        return int(ptr), int(size)

    def clear(self) -> None:
        self._check(self._d.cuMemsetD8(self.ptr, 0, self.nbytes), "cuMemsetD8")

    def _fetch(self, typecode: str, ptr: int, nbytes: int):
        """The device global at `ptr` copied back as an array of `typecode` items."""
        import array
        buf = array.array(typecode, bytes(nbytes))
        self._check(self._d.cuMemcpyDtoH(buf.buffer_info()[0], ptr, nbytes), "cuMemcpyDtoH")
        return buf

    def read(self, ctas: int) -> list[list[tuple[int, int]]]:
        buf, n = self._fetch("Q", self.ptr, self.nbytes), len(EVENTS)
        return [[(buf[(c * n + e) * 2], buf[(c * n + e) * 2 + 1]) for e in range(n)] for c in range(ctas)]

    def sms(self, ctas: int) -> list[int]:
        return list(self._fetch("I", self.sm_ptr, self.sm_bytes)[:ctas])


def run_case(shape: str, spec_text: str, defines: dict[str, int], befores: list[int], repeat: int, dev) -> dict:
    import torch

    from cudal2 import timing
    from cudal2.backends import build_kernel
    from cudal2.check import check_kernel, make_inputs
    from cudal2.problems import Problem
    from cudal2.spec import KernelSpec
    problem = Problem.parse(shape)
    spec = KernelSpec.parse(spec_text)
    if spec.family != "wgmma":
        raise ValueError(f"{spec_text!r}: the timeline is built into the wgmma family only")
    out = {"shape": problem.text, "spec": spec.text, "defines": defines, "runs": []}
    st = Stamped(spec, problem, dev, defines)
    kernels = {"filed": build_kernel(spec, problem, dev), "stamped": st.kernel}
    if defines:
        kernels["variant"] = build_variant(spec, problem, dev, prefix(defines))
    for name, k in kernels.items():
        rep = check_kernel(k, problem, "cuda", checks=("random",))
        if not rep.passed:
            out["error"] = f"the {name} kernel failed the check: {rep.reason}"
            return out
    a, b = make_inputs(problem, "cuda", torch.Generator(device="cuda").manual_seed(1))
    cs = {n: torch.empty(problem.M, problem.N, dtype=torch.float16, device="cuda") for n in kernels}
    stats = timing.offline({n: (lambda k=k, c=cs[n]: k(a, b, c)) for n, k in kernels.items()}, min_ms=50)
    out["offline_us"] = {k: round(v.median_us, 3) for k, v in stats.items()}
    c2 = cs["stamped"]
    # The launches ahead of the stamped one are the same kernel without stamps: a stamped one would
    # leave its stamps where the measured launch writes none (a workspace split-K's slice that is
    # last in one launch and not in the next).
    ahead, c_ahead = kernels.get("variant", kernels["filed"]), cs.get("variant", cs["filed"])
    grid = st.kernel._grid_wgmma(problem.M, problem.N)
    out["grid_ctas"] = grid
    if grid > MAX_CTAS:
        out["note"] = f"grid of {grid} CTAs: stamps kept for the first {MAX_CTAS}"
    for before in befores:
        for r in range(repeat):
            torch.cuda.synchronize()
            st.clear()
            e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            # Everything queued behind a GPU sleep, so the `before` launches and the stamped one run
            # back to back whatever the host's enqueue rate (as the offline clock does).
            torch.cuda._sleep(SLEEP_CYCLES)
            for _ in range(before):
                ahead(a, b, c_ahead)
            e0.record()
            st.kernel(a, b, c2)
            e1.record()
            torch.cuda.synchronize()
            n = min(grid, MAX_CTAS)
            raw = st.read(n)
            summary = summarize(raw, e0.elapsed_time(e1) * 1e3)
            out["runs"].append({"before": before, "repeat": r, "summary": summary,
                                "sms": st.sms(n), "stamps": raw})
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--case", action="append", default=[],
                    help="'MxNxK:layout|<wgmma spec text>[|NAME=VALUE ...]' (template defines: a variant)")
    ap.add_argument("--cases", help="a file of cases, one per line ('#' comments), e.g. bench/timeline_cases.txt")
    ap.add_argument("--before", default="0,200", help="launches queued back to back before the stamped "
                    "one, comma-separated (0: after an idle GPU)")
    ap.add_argument("--repeat", type=int, default=3, help="stamped launches per --before value")
    ap.add_argument("--out", required=True)
    args = ap.parse_args(argv)
    texts = list(args.case)
    if args.cases:
        texts += [l for l in (x.strip() for x in Path(args.cases).read_text().splitlines()) if l and not l.startswith("#")]
    if not texts:
        ap.error("no case: give --case or --cases")
    cases = [parse_case(c) for c in texts]              # bad input refused before the GPU is touched
    befores = [int(x) for x in args.before.split(",") if x.strip()]
    if any(not 0 <= b <= 1000 for b in befores) or args.repeat < 1:
        # past ~1000 launches the host may outrun the GPU sleep that keeps the train back to back
        ap.error("--before values must be in 0..1000 and --repeat >= 1")
    from cudal2.device import current
    from cudal2.versions import collect, source_commit
    dev = current()
    commit = source_commit()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    doc = {"card": dev.name, "device": dev.key, "device_info": dev.to_dict(), "commit": commit, "versions": collect(),
           "command": "python3 bench/cta_timeline.py " + " ".join(sys.argv[1:] if argv is None else argv),
           "events": EVENTS, "results": []}
    results = doc["results"]
    for shape, spec, defines in cases:
        try:
            results.append(run_case(shape, spec, defines, befores, args.repeat, dev))
        except Exception as e:          # one case's failure is a row, the others still run
            results.append({"shape": shape, "spec": spec, "defines": defines, "error": f"{type(e).__name__}: {e}"})
        r = results[-1]
        print(r.get("error") or f"{r['shape']} offline {r['offline_us']} grid {r['grid_ctas']}", flush=True)
        # Written after every case: a call stopped at its time limit keeps the cases it finished.
        doc["complete"] = len(results) == len(cases)
        (out / f"cta_timeline_{commit}.json").write_text(json.dumps(doc))
        md = table([r for r in results if "runs" in r])
        (out / f"cta_timeline_{commit}.md").write_text(md)
    print(md)
    return 0 if all("error" not in r for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
