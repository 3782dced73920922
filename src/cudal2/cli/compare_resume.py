"""`cudal2 compare --resume` and its rows as they come in: an earlier compare JSON's rows that still
time what would run now are kept (cudal2.compare_rows.resume_rows), the other shapes are timed, and
the JSON is rewritten every ~10 s while they are, so a crash or a device call's time limit loses
little; the file's `runs` record each invocation."""
from __future__ import annotations

import time
from dataclasses import asdict
from pathlib import Path

import typer

SAVE_EVERY_S = 10.0


def resume_state(json_path, problems, cfg, modes, names, source, registry, spec, device):
    """(rows kept, problems to time, the file's runs) for --resume; a missing file starts a new
    compare. ValueError: another compare's settings, or not a compare JSON."""
    from ..compare_rows import resume_rows
    from ..report import read_json
    if not Path(json_path).exists():
        typer.echo(f"--resume {json_path}: no such file yet, a new compare")
        return [], problems, []
    doc = read_json(json_path)
    config = {**asdict(cfg), "modes": list(modes), "baselines": list(names), "kernel_source": source}
    entries = lt = None
    if registry is not None:
        from ..lt_dispatch import lt_version
        from ..registry import Registry
        entries, lt = {e.problem: e for e in Registry.load(registry).all(device.key)}, lt_version()
    kept, todo, stale = resume_rows(doc, problems, config, entries, lt, spec_text=spec)
    why: dict[str, int] = {}
    for v in stale.values():
        why[v] = why.get(v, 0) + 1
    was = {id(o) for o in doc.get("rows") or []}
    settled = sum(1 for r in kept if r.get("cudal2_settled") and id(r) not in was)
    typer.echo(f"--resume {json_path}: {len(kept)} rows kept"
               + (f" ({settled} settled from their own torch.matmul column: dispatch calls it now)" if settled else "")
               + f", {len(todo)} shapes to time"
               + (f" ({len(stale)} timed again: " + "; ".join(f"{n} {w}" for w, n in why.items()) + ")"
                  if stale else ""))
    return kept, todo, list(doc.get("runs") or [])


class RowSink:
    """The compare's rows: the kept ones and each new one as it is timed, in the problems' order.
    `run_meta` is filled by compare.run before the first shape; with a JSON path, `add` rewrites the
    file at most every SAVE_EVERY_S seconds (the final save is the caller's). `summarize`:
    compare_measure.summaries."""

    def __init__(self, problems, kept: list, runs: list, json_path, modes, names, summarize):
        self.order = {p.text: i for i, p in enumerate(problems)}
        self.kept, self.new, self.runs = list(kept), [], list(runs)
        self.json_path, self.modes, self.names = json_path, modes, names
        self.summarize = summarize      # compare_measure.summaries (passed in by compare.run)
        self.run_meta: dict = {}
        self._saved = time.monotonic()

    def rows(self) -> list:
        return sorted(self.kept + self.new,
                      key=lambda r: self.order.get(f"{r['shape']}:{r.get('layout', 'nn')}", len(self.order)))

    def meta(self) -> dict:
        this = {"shapes": len(self.new), "kept": len(self.kept), "ts": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
        return {**self.run_meta, "runs": self.runs + [this]}

    def add(self, row: dict) -> None:
        self.new.append(row)
        if self.json_path and time.monotonic() - self._saved > SAVE_EVERY_S:
            from ..report import write_json
            rows = self.rows()
            write_json(self.json_path, rows, self.meta(), self.summarize(rows, self.modes, self.names))
            self._saved = time.monotonic()
