"""Which figures slid: a run's figures against those recorded in docs/benchmarks.md.

``python bench/run.py --compare [--only SECTION ...]`` measures and then
compares; ``python bench/compare.py RESULT.json`` compares what an earlier
``python bench/run.py --json`` wrote. Either prints, figure by figure, what
was recorded, what was measured now and whether it slid, and exits 3 when
one did (1 and 2 stay run.py's: a section that could not measure, bad usage).

The recorded figures are one table in docs/benchmarks.md, marked by the
comment line :data:`MARK` so that prose and other tables around it can change
freely. Each row names a figure by its ``--json`` key (a headline key, a
row's key or a ratio's key), the figure as recorded, which way is better, and
how far it may move the wrong way before it is called slid: this machine is
shared and noisy, so a figure within its tolerance held, whichever way it
moved. A figure this run did not measure (a section not run, a service that
would not start) is said to be not measured, never slid.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

#: the comment line above the table of recorded figures in docs/benchmarks.md
MARK = "<!-- recorded figures: python bench/run.py --compare reads this table -->"
DOC = Path(__file__).resolve().parent.parent / "docs" / "benchmarks.md"
BETTER = ("higher", "lower")
#: the exit status when a figure slid
SLID_EXIT = 3


class FiguresError(ValueError):
    """The recorded table cannot be read; the message says where and why."""


@dataclass(frozen=True)
class Figure:
    """One recorded figure: its ``--json`` key, its value, which way is better,
    and the share of it (0.25: 25 %) it may move the wrong way and still hold."""

    key: str
    recorded: float
    better: str
    tolerance: float


@dataclass(frozen=True)
class Verdict:
    figure: Figure
    #: None: this run did not measure it
    now: Optional[float]

    @property
    def change(self) -> Optional[float]:
        """now / recorded - 1, in the figure's own direction (a rise of a time is positive)."""
        if self.now is None or not self.figure.recorded:
            return None
        return self.now / self.figure.recorded - 1

    @property
    def word(self) -> str:
        """slid, held, improved or not measured."""
        change = self.change
        if self.now is None:
            return "not measured"
        if change is None:  # recorded as 0: any amount the wrong way is a slide
            worse = self.now < 0 if self.figure.better == "higher" else self.now > 0
            return "slid" if worse else "held"
        worse_by = -change if self.figure.better == "higher" else change
        if worse_by > self.figure.tolerance:
            return "slid"
        if -worse_by > self.figure.tolerance:
            return "improved"
        return "held"

    @property
    def slid(self) -> bool:
        return self.word == "slid"


def _cells(line: str) -> list[str]:
    return [c.strip() for c in line.strip().strip("|").split("|")]


def _number(text: str, where: str) -> float:
    try:
        return float(text.replace(" ", ""))
    except ValueError:
        raise FiguresError(f"{where}: {text!r} is not a number") from None


def _figure(cells: list[str], where: str) -> Figure:
    if len(cells) != 4:
        raise FiguresError(
            f"{where}: a figure's row has 4 cells (figure, recorded, better, slid beyond), not {len(cells)}"
        )
    key, recorded, better, tolerance = cells
    key = key.strip("`")
    if not key:
        raise FiguresError(f"{where}: the figure's key is empty")
    if better not in BETTER:
        raise FiguresError(f"{where}: better is {' or '.join(BETTER)}, not {better!r}")
    if not tolerance.endswith("%"):
        raise FiguresError(f"{where}: the tolerance is a percentage (25 %), not {tolerance!r}")
    share = _number(tolerance[:-1], where) / 100
    if share < 0:
        raise FiguresError(f"{where}: the tolerance cannot be negative")
    return Figure(key, _number(recorded, where), better, share)


def parse(text: str) -> list[Figure]:
    """The figures of the table under :data:`MARK` in ``text``: a header row,
    its separator, then one row per figure, up to the first line that is not
    a table row. Raises FiguresError, naming the line, for anything else."""
    lines = text.splitlines()
    try:
        start = next(i for i, line in enumerate(lines) if line.strip() == MARK)
    except StopIteration:
        raise FiguresError(f"no table of recorded figures (marked {MARK})") from None
    rows = []
    for number, line in enumerate(lines[start + 1 :], start=start + 2):
        if not line.strip() and not rows:
            continue  # blank lines between the mark and the table
        if not line.lstrip().startswith("|"):
            break
        rows.append((number, line))
    if len(rows) < 3:
        raise FiguresError(f"line {start + 1}: the marked table has no figures")
    figures = [_figure(_cells(line), f"line {number}") for number, line in rows[2:]]
    seen: set[str] = set()
    for (number, _line), figure in zip(rows[2:], figures):
        if figure.key in seen:
            raise FiguresError(f"line {number}: {figure.key} is recorded twice")
        seen.add(figure.key)
    return figures


def measured(result: dict, key: str) -> Optional[float]:
    """A figure of a ``--json`` result: a headline key, else a row's median, else a ratio's value."""
    value = result.get(key)
    if value is None:
        value = (result.get("rows", {}).get(key) or {}).get("median")
    if value is None:
        value = (result.get("ratios", {}).get(key) or {}).get("value")
    return None if value is None or isinstance(value, bool) else float(value)


def compare(figures: list[Figure], result: dict) -> list[Verdict]:
    return [Verdict(f, measured(result, f.key)) for f in figures]


def _fmt(value: Optional[float]) -> str:
    if value is None:
        return "-"
    return f"{value:.4g}" if abs(value) < 1000 else f"{value:.0f}"


def report(verdicts: list[Verdict], out=None) -> None:
    """One line per figure: recorded, now, the change and the verdict (on ``out``, else stdout)."""
    out = out or sys.stdout
    width = max([6] + [len(v.figure.key) for v in verdicts])
    print(f"{'figure':<{width}} {'recorded':>9} {'now':>9} {'change':>8}  verdict", file=out)
    for v in verdicts:
        change = "" if v.change is None else f"{v.change * 100:+.0f}%"
        allowed = f"(better {v.figure.better}, slid beyond {v.figure.tolerance * 100:g} %)"
        word = v.word.upper() if v.slid else v.word
        print(
            f"{v.figure.key:<{width}} {_fmt(v.figure.recorded):>9} {_fmt(v.now):>9} {change:>8}  {word} {allowed}",
            file=out,
        )
    slid = [v.figure.key for v in verdicts if v.slid]
    print(f"slid: {', '.join(slid)}" if slid else "nothing slid", file=out)
    if slid:
        print(
            "the recorded figures are one machine's at one hour: before looking for a cause, measure the "
            "recorded commit and this one side by side (bench/startup_compare.py, bench/dashboard_compare.py)",
            file=out,
        )


def recorded(doc: Path = DOC) -> list[Figure]:
    return parse(doc.read_text(encoding="utf-8"))


def main(argv: Optional[list[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="python bench/compare.py", description=__doc__.splitlines()[0])
    parser.add_argument("result", type=Path, help="what python bench/run.py --json printed")
    parser.add_argument("--figures", type=Path, default=DOC, help="where the recorded figures are (%(default)s)")
    args = parser.parse_args(argv)
    try:
        figures = recorded(args.figures)
        result = json.loads(args.result.read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:  # FiguresError and a bad JSON file are ValueErrors
        print(f"bench/compare.py: {e}", file=sys.stderr)
        return 2
    verdicts = compare(figures, result)
    report(verdicts)
    return SLID_EXIT if any(v.slid for v in verdicts) else 0


if __name__ == "__main__":
    sys.exit(main())
