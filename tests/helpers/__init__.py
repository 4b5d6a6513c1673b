"""What the tests share, each in one place (imported as ``from helpers.waiting import until``).

pytest finds this package because tests/ is on its path (tests/ is no package,
so pytest puts it first on ``sys.path``); bench/common.py puts tests/ there too.
Data the tools find by path stays beside the tests: tests/stubs/ (the
nvidia-smi stub, put first on PATH), tests/captures/ (real nodes' output) and
tests/__snapshots__/ (pytest-textual-snapshot's pictures, by test module).
"""
