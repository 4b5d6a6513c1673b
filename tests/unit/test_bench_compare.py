"""bench/compare.py: reading the recorded figures and saying which slid (no timing here)."""

from __future__ import annotations

import importlib.util
import json
import sys

import pytest

from helpers.paths import CHECKOUT

_spec = importlib.util.spec_from_file_location("bench_compare", CHECKOUT / "bench" / "compare.py")
assert _spec is not None and _spec.loader is not None
compare = importlib.util.module_from_spec(_spec)
sys.modules[_spec.name] = compare  # its dataclasses look their module up there
_spec.loader.exec_module(compare)

TABLE = f"""# Benchmarks

Some prose, and another table that is not the figures:

| a | b |
| --- | --- |
| 1 | 2 |

{compare.MARK}

| figure | recorded | better | slid beyond |
| --- | ---: | --- | ---: |
| `occupancy_speedup_8` | 142 | higher | 25 % |
| `tui_cpu_pct_8` | 0.4 | lower | 50 % |
| `topology_mismatches_8` | 0 | lower | 0 % |
| `docker_ps_200_ms` | 1 000 | lower | 50% |

Prose after it.
"""


def verdicts(result: dict) -> dict[str, str]:
    return {v.figure.key: v.word for v in compare.compare(compare.parse(TABLE), result)}


def test_the_marked_table_is_read_and_nothing_else():
    figures = compare.parse(TABLE)
    assert [(f.key, f.recorded, f.better, f.tolerance) for f in figures] == [
        ("occupancy_speedup_8", 142.0, "higher", 0.25),
        ("tui_cpu_pct_8", 0.4, "lower", 0.5),
        ("topology_mismatches_8", 0.0, "lower", 0.0),
        ("docker_ps_200_ms", 1000.0, "lower", 0.5),
    ]


def test_the_docs_table_reads():
    figures = compare.recorded()
    keys = {f.key for f in figures}
    assert {"occupancy_speedup_8", "tui_cpu_pct_8", "tui_first_frame_s"} <= keys


def test_a_figure_is_slid_only_beyond_its_tolerance_the_wrong_way():
    got = verdicts(
        {
            "occupancy_speedup_8": 109.0,  # 23 % lower: within 25 %
            "tui_cpu_pct_8": 1.8,  # 4.5 times: slid
            "topology_mismatches_8": 0,
            "docker_ps_200_ms": 400.0,  # much better
        }
    )
    assert got == {
        "occupancy_speedup_8": "held",
        "tui_cpu_pct_8": "slid",
        "topology_mismatches_8": "held",
        "docker_ps_200_ms": "improved",
    }
    assert verdicts({"occupancy_speedup_8": 100.0})["occupancy_speedup_8"] == "slid"
    assert verdicts({"topology_mismatches_8": 1})["topology_mismatches_8"] == "slid"


def test_a_figure_not_measured_is_said_so_and_never_slid():
    got = compare.compare(compare.parse(TABLE), {"occupancy_speedup_8": None, "rows": {}, "ratios": {}})
    assert {v.word for v in got} == {"not measured"}
    assert not any(v.slid for v in got)


def test_a_figure_is_found_as_a_headline_a_row_or_a_ratio():
    result = {
        "tui_cpu_pct_8": None,
        "rows": {"tui_cpu_pct_8": {"median": 0.3}, "x": {"median": 2.0}},
        "ratios": {"occupancy_speedup_8": {"value": 150.0}},
    }
    assert compare.measured(result, "tui_cpu_pct_8") == 0.3
    assert compare.measured(result, "occupancy_speedup_8") == 150.0
    assert compare.measured(result, "nowhere") is None
    assert compare.measured({"met": True}, "met") is None  # a verdict is not a figure


@pytest.mark.parametrize(
    "row, words",
    [
        ("| `a` | 1 | higher |", "4 cells"),
        ("| `a` | one | higher | 25 % |", "'one' is not a number"),
        ("| `a` | 1 | faster | 25 % |", "better is higher or lower"),
        ("| `a` | 1 | higher | 25 |", "a percentage"),
        ("| `a` | 1 | higher | -5 % |", "cannot be negative"),
        ("| `` | 1 | higher | 5 % |", "key is empty"),
    ],
)
def test_a_bad_row_is_refused_naming_its_line(row, words):
    text = f"{compare.MARK}\n| figure | recorded | better | slid beyond |\n| --- | --- | --- | --- |\n{row}\n"
    with pytest.raises(compare.FiguresError, match="line 4: .*" + words):
        compare.parse(text)


def test_a_missing_or_empty_or_repeated_table_is_refused():
    with pytest.raises(compare.FiguresError, match="no table of recorded figures"):
        compare.parse("# Benchmarks\n")
    with pytest.raises(compare.FiguresError, match="has no figures"):
        compare.parse(f"{compare.MARK}\n| figure | recorded | better | slid beyond |\n| --- | --- | --- | --- |\n")
    twice = "| `a` | 1 | higher | 5 % |\n"
    with pytest.raises(compare.FiguresError, match="line 5: a is recorded twice"):
        compare.parse(f"{compare.MARK}\n| f | r | b | s |\n| - | - | - | - |\n{twice}{twice}")


def test_the_report_names_what_slid_and_the_exit_status_says_so(tmp_path, capsys):
    doc = tmp_path / "benchmarks.md"
    doc.write_text(TABLE)
    result = tmp_path / "run.json"
    result.write_text(json.dumps({"occupancy_speedup_8": 150.0, "tui_cpu_pct_8": 1.8}))
    assert compare.main([str(result), "--figures", str(doc)]) == compare.SLID_EXIT
    out = capsys.readouterr().out
    assert "slid: tui_cpu_pct_8" in out
    assert "side by side (bench/startup_compare.py, bench/dashboard_compare.py)" in out
    assert "SLID" in out and "not measured" in out
    result.write_text(json.dumps({"tui_cpu_pct_8": 0.41}))
    assert compare.main([str(result), "--figures", str(doc)]) == 0
    out = capsys.readouterr().out
    assert "nothing slid" in out and "side by side" not in out


def test_an_unreadable_table_or_result_is_one_line_and_status_2(tmp_path, capsys):
    doc = tmp_path / "benchmarks.md"
    doc.write_text("# nothing recorded\n")
    result = tmp_path / "run.json"
    result.write_text("{}")
    assert compare.main([str(result), "--figures", str(doc)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "no table of recorded figures" in err
    doc.write_text(TABLE)
    result.write_text("{not json")
    assert compare.main([str(result), "--figures", str(doc)]) == 2
    assert capsys.readouterr().err.startswith("bench/compare.py: ")
