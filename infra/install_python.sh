#!/usr/bin/env bash
# Installs the project's Python package and its dependencies into a virtual environment.
# Shared by `make setup` and the container image (infra/Dockerfile), so both install the
# same way. MEDUSA_VENV: where (default <repo>/.venv); MEDUSA_PYTHON_BIN: the interpreter
# that creates it (default python3.11); MEDUSA_EXTRAS: extras to add ("dev" for the tests
# and linters, empty for none); MEDUSA_DEPENDENCIES_ONLY=1: only the dependencies, from
# pyproject.toml, without the package (an image's layer that outlives source changes).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(dirname "$here")"
venv="${MEDUSA_VENV:-$repo/.venv}"
python="${MEDUSA_PYTHON_BIN:-python3.11}"
extras="${MEDUSA_EXTRAS-dev}"

command -v "$python" >/dev/null || { echo "need $python on PATH (or MEDUSA_PYTHON_BIN=...)"; exit 1; }
[[ -d "$venv" ]] || "$python" -m venv "$venv"
echo "[setup] installing the Python package and its dependencies into $venv"
"$venv/bin/pip" install --quiet --upgrade pip
if [[ "${MEDUSA_DEPENDENCIES_ONLY:-}" == 1 ]]; then
  "$venv/bin/python" -c 'import sys, tomllib
print("\n".join(tomllib.load(open(sys.argv[1], "rb"))["project"]["dependencies"]))' \
    "$repo/pyproject.toml" > "$venv/dependencies.txt"
  "$venv/bin/pip" install --quiet -r "$venv/dependencies.txt"
  exit 0
fi
# Editable: the package finds schemas/ and infra/ beside its source.
"$venv/bin/pip" install --quiet -e "$repo${extras:+[$extras]}"
