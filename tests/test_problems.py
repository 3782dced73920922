"""Problem parsing, the grid and shapes from a Hugging Face config."""
import json

import pytest

from cudal2.problems import Problem, ProblemError, grid, parse_shapes, problems_from_hf_config


def test_parse_and_text():
    p = Problem.parse("4096x1024x64")
    assert (p.M, p.N, p.K, p.layout) == (4096, 1024, 64, "nn")
    assert Problem.parse(p.text) == p
    assert Problem.parse("8x16x32:nt").layout == "nt"
    assert Problem.parse("8x16x32", "nt").b_shape() == (16, 32)
    assert p.flops == 2 * 4096 * 1024 * 64
    assert p.min_bytes == 2 * (4096 * 64 + 64 * 1024 + 4096 * 1024)


@pytest.mark.parametrize("bad", ["4096x4096", "0x1x1", "ax1x1", "1x1x1:tt", "", "1x1x-1"])
def test_parse_rejects(bad):
    with pytest.raises(ProblemError):
        Problem.parse(bad)


def test_layout_conflict_is_an_error():
    with pytest.raises(ProblemError, match="layout"):
        Problem.parse("1x2x3:nt", "nn")


def test_grid_is_every_combination_of_ten_sizes():
    g = grid()
    assert len(g) == 1000 and len(set(g)) == 1000
    sizes = sorted({p.M for p in g})
    assert sizes == [64, 128, 256, 512, 1024, 2048, 4096, 8192, 12288, 16384]
    assert {p.layout for p in grid("nt")} == {"nt"}


def test_parse_shapes_forms(tmp_path):
    assert len(parse_shapes("grid:10")) == 100
    assert parse_shapes("1x2x3,4x5x6") == [Problem(1, 2, 3), Problem(4, 5, 6)]
    f = tmp_path / "s.txt"
    f.write_text("# comment\n1 2 3\n7x8x9:nt\n")
    assert parse_shapes(str(f)) == [Problem(1, 2, 3), Problem(7, 8, 9, "nt")]
    f.write_text("1 2\n")
    with pytest.raises(ProblemError, match=":1:"):
        parse_shapes(str(f))


def test_hf_config_problems(tmp_path):
    cfg = {"hidden_size": 64, "num_attention_heads": 4, "num_key_value_heads": 2,
           "intermediate_size": 256, "vocab_size": 1000}
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    probs = problems_from_hf_config(path, [1, 16])
    # per token count: q/o (64x64), k/v (32x64), gate/up (256x64), down (64x256), lm_head: 5 distinct
    assert len(probs) == 10
    assert Problem(16, 32, 64, "nt") in probs            # k_proj: out = kv_heads * head_dim = 32
    assert Problem(1, 64, 256, "nt") in probs            # down_proj
    assert Problem(1, 1000, 64, "nt") in probs           # lm_head
    with pytest.raises(ProblemError, match="hidden_size"):
        problems_from_hf_config({}, [1])


def test_a_long_shape_list_is_not_taken_for_a_file_name():
    # 28 decode shapes in one argument: past the OS's file-name limit, Path.is_file raised.
    text = ",".join(f"{m}x{n}x{k}" for m in (1, 2, 4, 8, 16, 32, 64)
                    for n, k in ((4096, 4096), (1024, 4096), (14336, 4096), (4096, 14336)))
    got = parse_shapes(text, "nt")
    assert len(got) == 28 and got[0] == Problem(1, 4096, 4096, "nt") and got[-1] == Problem(64, 4096, 14336, "nt")


def test_of_row_is_the_problem_a_compare_row_timed():
    from cudal2.problems import Problem
    assert Problem.of_row({"M": 7, "N": 100, "K": 3000, "layout": "nt"}) == Problem(7, 100, 3000, "nt")
    assert Problem.of_row({"M": 64, "N": 64, "K": 64}).text == "64x64x64:nn"   # rows before layouts: nn
