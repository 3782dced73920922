"""The README's examples run as written (those that need no GPU).

The rule, applied to README.md's fenced blocks:
- ```python blocks run in a fresh interpreter. The README's block picks `cuda` when a GPU is visible
  and the CPU otherwise, so here it runs the fallback path, as written.
- ```bash blocks: backslash continuations are joined; every line that starts with `cudal2 ` runs,
  in order, unless its trailing comment says GPU or the block has a comment line that says GPU
  (the `pip install` / `pytest` lines are this suite's own set-up and are not run).
- The commands run in a temp directory, so what they write (runs/, exports) lands there; it holds
  a link to the checkout's bench/ (the committed store the replay reads) and a small decoder
  config.json for `cudal2 problems --hf-config config.json`.
Each must exit 0 with no traceback. Together about 90-120 s on 2 cores (the two replays and `cudal2 train` are most of it).
"""
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
CLI = [sys.executable, "-c", "from cudal2.cli import main; main()"]
CONFIG = {"hidden_size": 1024, "intermediate_size": 2816, "num_attention_heads": 16,
          "num_key_value_heads": 4, "vocab_size": 8192}


def blocks(lang: str) -> list[str]:
    return re.findall(rf"^```{lang}\n(.*?)^```", (ROOT / "README.md").read_text(), flags=re.S | re.M)


def cli_commands() -> list[tuple[str, bool]]:
    """(command, runs without a GPU) for every `cudal2 ...` line of the bash blocks."""
    out = []
    for block in blocks("bash"):
        lines = block.replace("\\\n", " ").splitlines()
        gpu_block = any(ln.strip().startswith("#") and "GPU" in ln for ln in lines)
        for ln in lines:
            if not ln.startswith("cudal2 "):
                continue
            cmd, _, comment = ln.partition("  #")
            out.append((" ".join(cmd.split()), not gpu_block and "GPU" not in comment))
    return out


def test_the_rule_finds_the_examples():
    cmds = cli_commands()
    runnable = [c for c, ok in cmds if ok]
    assert len(blocks("python")) == 1
    assert any(c.startswith("cudal2 generate --replay") for c in runnable)
    assert any(c.startswith("cudal2 check --backend triton") and "--interpret" in c for c in runnable)
    assert not any(c.startswith("cudal2 compare") for c in runnable)         # GPU
    assert sum(c.startswith("cudal2 generate --backend") for c, _ in cmds) == 2 and \
        not any(c.startswith("cudal2 generate --backend") for c in runnable)  # both need the GPU


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    d = tmp_path_factory.mktemp("readme")
    (d / "bench").symlink_to(ROOT / "bench")
    (d / "config.json").write_text(json.dumps(CONFIG))
    return d


def test_cli_examples_run(workdir):
    env = {**os.environ, "CUDAL2_REGISTRY": ""}       # the shipped registry, whatever the caller's env says
    env.pop("CUDAL2_REGISTRY")
    ran = []
    for cmd, ok in cli_commands():
        if not ok:
            continue
        args = [os.path.expanduser(a) for a in cmd.split()[1:]]
        r = subprocess.run(CLI + args, cwd=workdir, env=env, capture_output=True, text=True, timeout=600)
        assert r.returncode == 0, f"{cmd}\n{r.stdout[-2000:]}\n{r.stderr[-2000:]}"
        assert "Traceback" not in r.stdout + r.stderr, cmd
        ran.append((cmd, r.stdout))
        if "--replay" in cmd and "--cost-model" not in cmd:
            replay_err = r.stderr
    outs = dict(ran)
    assert len(ran) == 17
    interp = next(o for c, o in ran if "--interpret" in c)
    assert interp.count("PASS") == 6
    replay = next(o for c, o in ran if "--replay" in c)
    # cudal2 train on the committed stores: its held-out figure, then the replay seeded by the model.
    trained = next(o for c, o in ran if c.startswith("cudal2 train"))
    # 235 held-out shapes with the stores of 2026-12-03 (NOTES.md); top1 0.984 there.
    assert re.search(r"held-out validation over \d+ shapes", trained)
    assert float(re.search(r"cost model  top1 (\S+)", trained).group(1)) >= 0.95
    assert (workdir / "runs" / "cost.pt").is_file()
    assert "5 shapes," in next(o for c, o in ran if "--cost-model" in c)
    assert "5 shapes," in replay and "evaluations replayed from the store" in replay
    # The progress line counts the shapes whose kernel beat best-cuBLAS in the full pass (it said 0
    # beside rows of 1.03-1.11x when the registry kept a faster entry).
    rows = [ln.split("│") for ln in replay.splitlines() if ln.startswith("│")]
    wins = sum(float(cols[7].strip().rstrip("x")) > 1.0 for cols in rows if cols[7].strip() != "-")
    assert f"kernel beats best-cuBLAS on {wins} " in replay_err
    assert (workdir / "runs" / "registry" / "index.json").is_file()          # outputs under runs/
    assert sorted(os.listdir(workdir)) == ["bench", "config.json", "runs"]    # and nothing else
    assert "3111 ok, 0 bad" in outs["cudal2 registry verify --render"]
    # The shipped registry already holds that compare's timings: nothing new to add, nothing moves.
    added = next(o for c, o in ran if c.startswith("cudal2 registry add-timings"))
    assert "h200-sm90: 0 cuBLAS entries got a timing; 0 now dispatch to another call" in added
    assert "--server-guard 0.97: 0 kernel entries re-filed as cuBLAS" in added      # applied before shipping
    assert (workdir / "runs" / "my-registry" / "index.json").is_file()
    assert "0 entries re-rendered" in outs["cudal2 registry rerender --registry runs/my-registry"]
    # the H100's whole-grid compare (runs 87-90): its shapes without an entry, one timing each, so
    # no cuBLASLt call qualifies (>= 2 timings) and every entry it would file calls torch.matmul
    # the graph-clock rule over run 148's one timing (no server mode, no dispatched call): nothing
    # files, each shape says why, and no dispatched call is guarded
    graph = next(o for c, o in ran if c.startswith("cudal2 registry file-graph"))
    assert "h100-sm90: would file 0 kernel entries over cuBLAS entries (none); 39 shapes left alone" in graph
    assert "# timing(s) of it, the rule asks #" in graph and "--dispatch-guard 0.97: 0 dispatched calls" in graph
    filed = next(o for c, o in ran if c.startswith("cudal2 registry file-cublas"))
    m = re.search(r"h100-sm90: would file (\d+) cuBLAS entries \(torch (\d+)\); (\d+) shapes left alone", filed)
    # every one calls torch.matmul; with the shapes that hold an entry, the compare's 1000
    assert m and m[1] == m[2] and int(m[1]) + int(m[3]) == 1000 and int(m[1]) > 500, filed
    # the README's sequence re-filed nothing in runs/my-registry since its export (add-timings and
    # file-cublas ran on the shipped one or dry), so joining the shipped one back moves nothing
    # the shipped registry already holds run 137's sweep kernels (keep-lost, 2026-12-07): every
    # cuBLAS entry it measured names a kernel, so nothing more is kept
    kept = next(o for c, o in ran if c.startswith("cudal2 registry keep-lost"))
    assert "h100-sm90: would keep a losing kernel on 0 cuBLAS entries" in kept and "it names a kernel already" in kept
    merged = next(o for c, o in ran if c.startswith("cudal2 registry merge"))
    assert "would merge into runs/my-registry: 0 added, 0 replaced, 0 kept" in merged, merged
    probs = outs["cudal2 problems --hf-config config.json --tokens 1,16,128,2048"].split()
    assert "1x1024x1024:nt" in probs and "2048x8192x1024:nt" in probs


def test_python_example_runs():
    (code,) = blocks("python")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
