#!/bin/sh
# Install tpnode-tui from this checkout into a virtual environment of its own,
# and put the `tpnode-tui` command on PATH:
#   sh install.sh           as root: /opt/tpnode-tui, the command at /usr/local/bin/tpnode-tui
#                           (where the systemd unit and `--host` look for it);
#                           as anyone else: ~/.local/share/tpnode-tui, the command at ~/.local/bin/tpnode-tui
#   sh install.sh --demo    the same, then opens the dashboard on a simulated node
#   sh install.sh --latest  the newest releases pyproject.toml allows, instead of
#                           the versions the tests ran (requirements/node.txt)
# A system python3 that is "externally managed" (Debian 12, Ubuntu 24.04) refuses
# `pip install` outside a virtual environment, and Debian's may have no pip at
# all: a venv needs only python3 and its venv module (the python3-venv package).
# It installs the versions locked in requirements/node.txt (their hashes checked),
# the ones the test suite ran on, so every node's agent runs what was tested.
# Running it again installs this checkout's copy, and its locked versions, in place.
set -eu

usage="usage: sh install.sh [--demo] [--latest]"
demo=no
latest=no
for arg in "$@"; do
    case "$arg" in
        --demo) demo=yes ;;
        --latest) latest=yes ;;
        -h | --help) echo "$usage"; exit 0 ;;
        *) echo "tpnode-tui install: unknown argument $arg ($usage)" >&2; exit 2 ;;
    esac
done

cd "$(dirname "$0")"
if [ ! -f pyproject.toml ] || [ ! -d tpnode_tui ] || [ ! -f requirements/node.txt ]; then
    echo "tpnode-tui install: run it from a tpnode-tui checkout (no pyproject.toml, tpnode_tui or requirements/node.txt beside install.sh)" >&2
    exit 2
fi

if [ "$(id -u)" -eq 0 ]; then
    prefix=/opt/tpnode-tui
    bin=/usr/local/bin
else
    prefix="${XDG_DATA_HOME:-$HOME/.local/share}/tpnode-tui"
    bin="$HOME/.local/bin"
fi

python=$(command -v python3 || true)
# As root, what is installed is run by every account and by the agent: a python3
# of root's own first on its PATH (pyenv, conda under /root) is one they may not
# run, and the command would be "Permission denied" for all but root. The
# system's is everyone's.
if [ "$(id -u)" -eq 0 ] && [ -x /usr/bin/python3 ] \
    && /usr/bin/python3 -c 'import sys; sys.exit(sys.version_info < (3, 10))' 2>/dev/null; then
    python=/usr/bin/python3
fi
if [ -z "$python" ]; then
    echo "tpnode-tui install: no python3 on PATH: install it (apt-get install python3 python3-venv) and run this again" >&2
    exit 1
fi
if ! "$python" -c 'import sys; sys.exit(sys.version_info < (3, 10))' 2>/dev/null; then
    echo "tpnode-tui install: tpnode-tui needs Python 3.10 or newer, and $python is $("$python" -V 2>&1)" >&2
    exit 1
fi
# Debian and Ubuntu ship venv's ensurepip apart, in python3-venv: without it
# `python3 -m venv` makes a half environment with no pip and says so in ten lines.
if ! "$python" -c 'import ensurepip, venv' 2>/dev/null; then
    echo "tpnode-tui install: $python cannot make a virtual environment (no ensurepip): install python3-venv (as root: apt-get install python3-venv) and run this again" >&2
    exit 1
fi

echo "tpnode-tui install: installing into $prefix (a minute: it fetches textual, aiohttp and the rest)" >&2
"$python" -m venv "$prefix"
# pip builds in the tree it is given (build/, *.egg-info): give it a copy, so the
# checkout stays as it was cloned, with nothing of root's in another account's tree
source=$(mktemp -d "${TMPDIR:-/tmp}/tpnode-tui-install.XXXXXX")
cp -R pyproject.toml README.md tpnode_tui "$source"/
find "$source" -name __pycache__ -prune -exec rm -rf {} +
pip_install() { "$prefix/bin/python" -m pip install -q --disable-pip-version-check "$@"; }
if [ "$latest" = yes ]; then
    pip_install --upgrade --upgrade-strategy eager "$source" || { rm -rf "$source"; exit 1; }
else
    # the locked versions first (setuptools among them), then the package over
    # them with nothing else fetched
    { pip_install --require-hashes -r requirements/node.txt &&
        pip_install --upgrade --no-deps --no-build-isolation "$source"; } || { rm -rf "$source"; exit 1; }
fi
rm -rf "$source"
mkdir -p "$bin"
ln -sf "$prefix/bin/tpnode-tui" "$bin/tpnode-tui"
echo "tpnode-tui install: $("$bin/tpnode-tui" --version) installed; the command is $bin/tpnode-tui" >&2

case ":$PATH:" in
    *":$bin:"*) command=tpnode-tui ;;
    *)
        command="$bin/tpnode-tui"
        echo "tpnode-tui install: $bin is not on your PATH: add it (export PATH=\"$bin:\$PATH\" in ~/.profile), or run $bin/tpnode-tui" >&2
        ;;
esac

if [ "$demo" = yes ]; then
    exec "$bin/tpnode-tui" --demo
fi
echo "tpnode-tui install: try it: $command --demo" >&2
