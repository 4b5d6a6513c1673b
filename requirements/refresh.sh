#!/usr/bin/env bash
# Refresh the locks from pyproject.toml's ranges, to the newest releases that fit:
#   bash requirements/refresh.sh                       every package to its newest
#   bash requirements/refresh.sh --upgrade-package X   only X (and what X needs); others stay
# test.txt is what tests/run.sh installs (the package's dependencies, its test
# extra, and setuptools to build it); node.txt is what install.sh installs on a
# node, and is drawn from test.txt, so a node runs only versions the tests ran.
# Both hold every wheel's hash and hold for Python 3.10 and newer, on any platform.
# After a refresh, run `bash tests/run.sh` and commit the locks with what it needed.
set -euo pipefail
cd "$(dirname "$0")/.."

uv_version=0.13.9
uv=$(command -v uv || true)
if [ -z "$uv" ]; then
    tools=$(mktemp -d "${TMPDIR:-/tmp}/tpnode-tui-uv.XXXXXX")
    trap 'rm -rf "$tools"' EXIT
    python3 -m venv "$tools"
    "$tools/bin/python" -m pip install -q --disable-pip-version-check "uv==$uv_version"
    uv="$tools/bin/uv"
fi

upgrade=(--upgrade)
if (($#)); then upgrade=("$@"); fi
compile=("$uv" pip compile --quiet --universal --python-version 3.10 --generate-hashes
    --custom-compile-command "bash requirements/refresh.sh")
"${compile[@]}" "${upgrade[@]}" pyproject.toml requirements/build.in --extra test -o requirements/test.txt
"${compile[@]}" pyproject.toml requirements/build.in -c requirements/test.txt -o requirements/node.txt
echo "requirements/test.txt and requirements/node.txt refreshed: run bash tests/run.sh before committing them" >&2
