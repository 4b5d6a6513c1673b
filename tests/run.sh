#!/usr/bin/env bash
# Install everything the test suite needs on a fresh Debian machine, then check
# the imports' layers, lint and types, and run every test.
#   bash tests/run.sh            the whole suite (what CI runs)
#   bash tests/run.sh --long     also the bigger load and fault tests
#   bash tests/run.sh tests/unit one tier (tests/unit, service, tui, system; or -m unit)
#   bash tests/run.sh --latest   the same against the newest releases pyproject.toml allows,
#                                in .venv-latest: drift found on purpose (not what CI runs)
# The suite runs on the versions locked in requirements/test.txt (hashes checked),
# so a release made after the lock cannot break it; bash requirements/refresh.sh
# moves the lock to the newest releases.
# System services the tests start themselves: redis-server, sshd (loopback, keys made
# by the tests), dockerd (private socket, no bridge, no iptables) with a busybox image
# imported from busybox-static. The web page's tests drive Debian's chromium through
# chromium-driver (the same package version, so the driver speaks the browser's protocol).
set -euo pipefail
cd "$(dirname "$0")/.."

venv=.venv
latest=no
if [ "${1:-}" = --latest ]; then
    shift
    venv=.venv-latest
    latest=yes
fi

missing=()
for pkg in redis-server docker.io busybox-static openssh-server prometheus chromium chromium-driver; do
    dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "ok installed" || missing+=("$pkg")
done
if ((${#missing[@]})); then
    if [ "$(id -u)" -eq 0 ]; then
        echo "installing ${missing[*]}" >&2
        apt-get update -qq
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
    else
        echo "not root, so not installing ${missing[*]}: tests that need them will be skipped (CI=true fails them)" >&2
    fi
fi

# The tests' own accounts (tests/helpers/accounts.py) run the CLI with this venv's
# interpreter, so it must be one every account may execute: the system's,
# where there is one (an interpreter under /root is root's alone).
python=python3
if [ -x /usr/bin/python3 ]; then python=/usr/bin/python3; fi
"$python" -m venv "$venv"
pip=("$venv/bin/python" -m pip install -q --disable-pip-version-check)
if [ "$latest" = yes ]; then
    "${pip[@]}" --upgrade --upgrade-strategy eager -e '.[test]'
else
    # exactly the locked versions, then the package itself over them, built
    # with the locked setuptools: nothing unpinned is fetched
    "${pip[@]}" --require-hashes -r requirements/test.txt
    "${pip[@]}" --no-deps --no-build-isolation -e .
fi
# The layers and "only the dashboard imports Textual" (pyproject.toml), lint,
# the formatting, and types, before the tests: each is quick and names exactly what is wrong.
"$venv/bin/lint-imports" --no-cache
"$venv/bin/ruff" check
# no function decides so much at once that it cannot be read in one go: radon's
# cyclomatic complexity of every block at most 20 (rank C), as ruff's C901 counts it too
"$venv/bin/xenon" --max-absolute C tpnode_tui
"$venv/bin/ruff" format --check
"$venv/bin/mypy"
exec "$venv/bin/python" -m pytest "$@"
