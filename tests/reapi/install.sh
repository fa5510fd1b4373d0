#!/usr/bin/env bash
# Install the REAPI test fixture: a Python 3.13 venv with BuildGrid 0.9.1 (the real REAPI server) and the
# packages our stand-in worker needs (grpcio and protobuf come with buildgrid). Idempotent: when the venv
# already matches requirements.txt it only checks and prints one line.
#
# Environment:
#   KBUILD_REAPI_VENV    venv location (default $HOME/.local/share/kbuild/reapi/buildgrid-0.9.1-venv)
#   KBUILD_REAPI_PYTHON  Python >= 3.13 interpreter to build the venv from (default: pyenv's 3.13, then python3.13)
#   KBUILD_REAPI_PG_BIN  directory holding initdb/pg_ctl/postgres (default: /usr/lib/postgresql/*/bin, then PATH)
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
venv="${KBUILD_REAPI_VENV:-$HOME/.local/share/kbuild/reapi/buildgrid-0.9.1-venv}"
req="$here/requirements.txt"

die() { echo "install.sh: error: $*" >&2; exit 1; }

# PostgreSQL: BuildGrid's Execution service (sql scheduler) accepts PostgreSQL only.
pg_bin="${KBUILD_REAPI_PG_BIN:-}"
if [[ -z "$pg_bin" ]]; then
  for d in $(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V -r) ; do
    [[ -x "$d/initdb" ]] && { pg_bin="$d"; break; }
  done
fi
if [[ -z "$pg_bin" ]] && command -v initdb >/dev/null 2>&1; then pg_bin="$(dirname "$(command -v initdb)")"; fi
for tool in initdb pg_ctl postgres; do
  [[ -n "$pg_bin" && -x "$pg_bin/$tool" ]] || \
    die "PostgreSQL binary '$tool' not found (looked in \$KBUILD_REAPI_PG_BIN, /usr/lib/postgresql/*/bin, PATH). Install it: apt-get install postgresql"
done

# Python >= 3.13: BuildGrid 0.9.x requires it.
is_py313() { [[ -x "$1" ]] && "$1" -c 'import sys; sys.exit(0 if sys.version_info >= (3, 13) else 1)' 2>/dev/null; }
py="${KBUILD_REAPI_PYTHON:-}"
if [[ -z "$py" ]]; then
  for cand in "$HOME"/.pyenv/versions/3.13*/bin/python3 "$(command -v python3.13 || true)" "$(command -v python3 || true)"; do
    if is_py313 "$cand"; then py="$cand"; break; fi
  done
fi
[[ -n "$py" ]] && is_py313 "$py" || \
  die "Python >= 3.13 not found (BuildGrid 0.9.1 needs it). Set KBUILD_REAPI_PYTHON or install it (e.g. pyenv install 3.13)"

stamp="$venv/.kbuild-reapi-stamp"
want="$(sha256sum "$req" | cut -d' ' -f1)"
if [[ -f "$stamp" && "$(cat "$stamp")" == "$want" && -x "$venv/bin/bgd" ]] && is_py313 "$venv/bin/python"; then
  echo "install.sh: already installed: BuildGrid 0.9.1 venv at $venv (PostgreSQL in $pg_bin)"
  exit 0
fi

start=$SECONDS
if ! is_py313 "$venv/bin/python"; then
  rm -rf "$venv"
  mkdir -p "$(dirname "$venv")"
  "$py" -m venv "$venv" || die "could not create a venv with $py at $venv"
fi
log="$venv/install.log"
if ! "$venv/bin/python" -m pip install --disable-pip-version-check --no-input --require-hashes \
      -r "$req" >"$log" 2>&1; then
  tail -n 20 "$log" >&2
  die "pip install -r $req failed (full log: $log)"
fi
"$venv/bin/python" -c 'import buildgrid, grpc, google.protobuf' >>"$log" 2>&1 || die "buildgrid does not import (see $log)"
echo "$want" >"$stamp"
echo "install.sh: installed BuildGrid 0.9.1 ($(grep -c '^[a-z].*==' "$req") pinned packages) into $venv with $py in $((SECONDS - start)) s (PostgreSQL in $pg_bin)"
