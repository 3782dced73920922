"""bench/chain_floor.py on the CPU: which shapes it measures, the per-class summary it writes and
its refusals (stream_cuda's chain kernels are checked on a card by tests/test_stream_cuda.py)."""
import pytest

from bench_import import load_bench


def _module():
    return load_bench("chain_floor")


def test_shapes_are_the_grid_classes_then_the_files_each_once(tmp_path):
    cf = _module()
    from cudal2.problems import grid
    from cudal2.stats import shape_class
    skinny = [(p.M, p.N, p.K) for p in grid("nt") if shape_class(p.M, p.N, p.K) == "skinny"]
    f = tmp_path / "decode.txt"
    f.write_text("# two decode shapes and a skinny grid one again\n1x4096x4096:nt\n7x1000x64\n"
                 f"{'x'.join(map(str, skinny[0]))}:nn\n")
    got = cf.shapes_of(["skinny"], [str(f)])
    assert got == skinny + [(1, 4096, 4096), (7, 1000, 64)]          # layout ignored, no repeat
    assert len(cf.shapes_of(["small", "skinny"], [])) == 304 + 64
    with pytest.raises(ValueError, match="--classes tiny"):
        cf.shapes_of(["tiny"], [])
    # --every: each every-th of the same list, spread over the whole of it
    every = cf.shapes_of(["skinny"], [str(f)], every=3)
    assert every == (skinny + [(1, 4096, 4096), (7, 1000, 64)])[::3] and len(every) == 22
    assert max(m for m, _, _ in every) > 1000 and min(m for m, _, _ in every) == 64
    with pytest.raises(ValueError, match="--every 0"):
        cf.shapes_of(["skinny"], [], every=0)


def test_the_measuring_order_spreads_any_prefix_over_the_list():
    """A time-boxed run measures shapes in bit-reversed order: every shape once, and its first eighth
    already spans the list (in grid order, the small and skinny classes' first 53 all have M = 64)."""
    cf = _module()
    assert cf.spread_order(list(range(8))) == [0, 4, 2, 6, 1, 5, 3, 7]
    assert cf.spread_order([]) == [] and cf.spread_order(["a"]) == ["a"]
    shapes = cf.shapes_of(["small", "skinny"], [])
    order = cf.spread_order(shapes)
    assert sorted(order) == sorted(shapes)
    first = order[: len(shapes) // 8]
    assert {m for m, _, _ in shapes[: len(first)]} == {64}
    assert len({m for m, _, _ in first}) >= 6 and max(m for m, _, _ in first) >= 8192


def test_padded_rounds_to_16_bytes():
    cf = _module()
    assert [cf.padded(n) for n in (1, 8, 9, 4096 * 7)] == [8, 8, 16, 4096 * 7]


def _rows():
    # offline: two small shapes (torch.matmul 1.25x and 1.6x the chain), one skinny (1.1x); server: one
    def r(m, n, k, mode, chain, torch, cfg):
        return {"shape": f"{m}x{n}x{k}", "M": m, "N": n, "K": k, "mode": mode, "chain_us": chain,
                "chain_config": cfg, "torch_us": torch, "torch_over_chain": round(torch / chain, 3)}
    return [r(64, 64, 64, "offline", 4.0, 5.0, "chain x4 t128 fit"),
            r(512, 256, 512, "offline", 5.0, 8.0, "chain x4 t128 fit"),
            r(64, 2048, 4096, "offline", 10.0, 11.0, "chain x4 t512 4/SM"),
            r(64, 64, 64, "server", 5.0, 6.0, "chain x4 t256 1/SM")]


def test_summary_is_the_geomean_per_mode_and_class():
    cf = _module()
    s = {(x["mode"], x["class"]): x for x in cf.summary(_rows())}
    assert s[("offline", "small")]["torch_over_chain"] == pytest.approx((1.25 * 1.6) ** 0.5, abs=1e-3)
    assert s[("offline", "small")]["fastest"] == {"chain x4 t128 fit": 2}
    assert s[("offline", "skinny")]["torch_over_chain"] == pytest.approx(1.1)
    assert s[("offline", "all")]["shapes"] == 3 and s[("offline", "all")]["chain_median_us"] == 5.0
    assert s[("server", "small")]["shapes"] == 1 and ("server", "skinny") not in s
    doc = {"card": "NVIDIA H200", "commit": "abc1234", "command": "python3 bench/chain_floor.py --out x",
           "shapes_asked": 5, "shapes_done": 3, "summary": cf.summary(_rows())}
    md = cf.markdown(doc)
    assert "3 of 5 shapes" in md and "| offline | small | 2 | 1.414 | - | 5.00 | chain x4 t128 fit 2 |" in md
    # the tiled chain's column where the rows have one (--panels)
    rows = _rows()
    rows[0].update({"panel_us": 4.8, "torch_over_panel": 5.0 / 4.8})
    rows[1].update({"panel_us": 6.0, "torch_over_panel": 8.0 / 6.0})
    s = {(x["mode"], x["class"]): x for x in cf.summary(rows)}
    assert s[("offline", "small")]["torch_over_panel"] == pytest.approx((5.0 / 4.8 * 8.0 / 6.0) ** 0.5, abs=1e-3)
    assert s[("offline", "skinny")]["torch_over_panel"] is None


def test_refusals(tmp_path, capsys):
    cf = _module()
    with pytest.raises(SystemExit):
        cf.main(["--out", str(tmp_path), "--modes", "offline,cold"])
    assert "--modes" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        cf.main(["--out", str(tmp_path), "--panels", "--panel-kinds", "panel,tma"])
    assert "--panel-kinds 'panel,tma'" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        cf.main(["--out", str(tmp_path), "--classes", ""])
    assert "no shapes" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        cf.main(["--out", str(tmp_path), "--shapes", str(tmp_path / "none.txt")])
    with pytest.raises(SystemExit):
        cf.main(["--out", str(tmp_path), "--classes", "skinny", "--resume", str(tmp_path / "none.json")])
    assert "--resume" in capsys.readouterr().err
    import torch
    if not torch.cuda.is_available():
        assert cf.main(["--out", str(tmp_path), "--classes", "skinny"]) == 3
        assert "no CUDA GPU" in capsys.readouterr().err


def test_resume_keeps_the_rows_of_shapes_measured_in_every_mode():
    """--resume: an earlier run's rows of the shapes asked, where every mode asked has one (and the
    tiled chain, with --panels); another card's file is refused."""
    cf = _module()
    rows = _rows()                                      # 64x64x64 in both modes, two others offline only
    earlier = {"device": "h100-sm90", "rows": rows}
    shapes = [(64, 64, 64), (512, 256, 512), (64, 2048, 4096)]
    kept = cf.kept_rows(earlier, "h100-sm90", shapes, ["offline", "server"], panels=False)
    assert sorted((r["shape"], r["mode"]) for r in kept) == [("64x64x64", "offline"), ("64x64x64", "server")]
    assert len(cf.kept_rows(earlier, "h100-sm90", shapes, ["offline"], panels=False)) == 3
    assert cf.kept_rows(earlier, "h100-sm90", shapes[1:], ["offline"], panels=True) == []
    rows[1]["panel_us"] = 6.0               # a row of the load kind alone (before the bulk kind): measured again
    assert cf.kept_rows(earlier, "h100-sm90", shapes, ["offline"], panels=True) == []
    rows[1]["panel_configs"] = 120          # both kinds checked and screened
    assert [r["shape"] for r in cf.kept_rows(earlier, "h100-sm90", shapes, ["offline"], panels=True)] == ["512x256x512"]
    with pytest.raises(ValueError, match="measured on h100-sm90, this card is h200-sm90"):
        cf.kept_rows(earlier, "h200-sm90", shapes, ["offline"], panels=False)
