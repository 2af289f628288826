#!/usr/bin/env bash
# SGLang, then the harness, into one virtual environment on a GPU runner: `make sglang-install` runs it.
# SGLang comes first so that its CUDA torch is the one the harness finds (the Makefile never pins the
# CPU build where a torch is already there). Exactly one source:
#   SGLANG_REF=<git ref>   a ref of $SGLANG_REPO, cloned into $SGLANG_SRC (the workflows check it out
#                          with actions/checkout instead and pass SGLANG_PATH)
#   SGLANG_SPEC=<pip spec> a release from the registry (default: sglang==0.5.23, what the scenarios pin)
#   SGLANG_PATH=<path>     an SGLang checkout (its python/ is the project), an unpacked sdist, a wheel,
#                          or a folder holding one wheel
# A checkout installs as SGLang's own CUDA CI does (scripts/ci/cuda/ci_install_dependency.sh):
# `pip install -e "python[EXTRAS]"`, torch from the PyTorch index of $SGLANG_CUDA, sglang-kernel from
# SGLang's wheel index of the same CUDA (the registry's build tracks one CUDA version only).
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON="${PYTHON:-python3}"
VENV="${VENV:-.venv}"
HARNESS_EXTRAS="${HARNESS_EXTRAS:-micro,report,history,postgres}"
SGLANG_REPO="${SGLANG_REPO:-https://github.com/sgl-project/sglang.git}"
SGLANG_SRC="${SGLANG_SRC:-.sglang-src}"
SGLANG_EXTRAS="${SGLANG_EXTRAS:-}"
SGLANG_CUDA="${SGLANG_CUDA:-cu130}"
SGLANG_REF="${SGLANG_REF:-}" SGLANG_SPEC="${SGLANG_SPEC:-}" SGLANG_PATH="${SGLANG_PATH:-}"

given=0
for v in "$SGLANG_REF" "$SGLANG_SPEC" "$SGLANG_PATH"; do [ -n "$v" ] && given=$((given + 1)); done
if [ "$given" -gt 1 ]; then
  echo "sglang-install: give one of SGLANG_REF, SGLANG_SPEC, SGLANG_PATH (got $given)" >&2
  exit 2
fi
[ "$given" -eq 0 ] && SGLANG_SPEC="sglang==0.5.23"
if [ -n "$SGLANG_PATH" ] && [ ! -e "$SGLANG_PATH" ]; then
  echo "sglang-install: SGLANG_PATH $SGLANG_PATH does not exist" >&2
  exit 2
fi

"$PYTHON" -c 'import sys; sys.exit(sys.version_info < (3, 11))' || {
  echo "sglang-install: $PYTHON is $("$PYTHON" -V 2>&1); the harness needs Python >= 3.11 (set PYTHON=python3.12)" >&2
  exit 2
}
test -x "$VENV/bin/python" || "$PYTHON" -m venv "$VENV"
pip=("$VENV/bin/python" -m pip install --disable-pip-version-check)
"${pip[@]}" -q --upgrade pip

if [ -n "$SGLANG_REF" ]; then
  scripts/fetch_sglang_ref.sh "$SGLANG_REPO" "$SGLANG_REF" "$SGLANG_SRC"
  SGLANG_PATH="$SGLANG_SRC"
fi

if [ -n "$SGLANG_PATH" ]; then
  # absolute: pip reads a bare relative name with [extras] as a project name, not a path
  SGLANG_PATH="$(realpath "$SGLANG_PATH")"
fi
extras="${SGLANG_EXTRAS:+[$SGLANG_EXTRAS]}"
if [ -n "$SGLANG_PATH" ] && [ -f "$SGLANG_PATH/python/pyproject.toml" ]; then
  project="$SGLANG_PATH/python"
  echo "sglang-install: SGLang checkout $SGLANG_PATH ($(git -C "$SGLANG_PATH" rev-parse --short HEAD 2>/dev/null || echo 'not a git tree'))"
  # torch, torchvision... at the versions the checkout pins, from the PyTorch index of its CUDA
  mapfile -t torch_specs < <(grep -Po '"(torch|torchaudio|torchvision)([<>=!~ ;][^"]*)?"' "$project/pyproject.toml" | tr -d '"' || true)
  if [ "${#torch_specs[@]}" -gt 0 ]; then
    "${pip[@]}" "${torch_specs[@]}" --index-url "https://download.pytorch.org/whl/$SGLANG_CUDA"
  fi
  "${pip[@]}" -e "$project$extras"
  kernel=$(grep -Po -m1 '(?<=sglang-kernel==)[0-9A-Za-z.\-]+' "$project/pyproject.toml" || true)
  if [ -n "$kernel" ]; then
    "${pip[@]}" --force-reinstall --no-deps "sglang-kernel==$kernel" --index-url "https://docs.sglang.ai/whl/$SGLANG_CUDA/"
  fi
elif [ -n "$SGLANG_PATH" ]; then
  if [ -d "$SGLANG_PATH" ] && [ ! -f "$SGLANG_PATH/pyproject.toml" ] && [ ! -f "$SGLANG_PATH/setup.py" ]; then
    mapfile -t wheels < <(find "$SGLANG_PATH" -maxdepth 1 -name 'sglang-*.whl')
    if [ "${#wheels[@]}" -ne 1 ]; then
      echo "sglang-install: $SGLANG_PATH holds no SGLang project and ${#wheels[@]} sglang-*.whl files (need one)" >&2
      exit 2
    fi
    SGLANG_PATH="${wheels[0]}"
  fi
  echo "sglang-install: SGLang from $SGLANG_PATH"
  "${pip[@]}" "$SGLANG_PATH$extras"
else
  echo "sglang-install: SGLang from the registry: $SGLANG_SPEC"
  "${pip[@]}" "$SGLANG_SPEC"
fi

# The harness without pulling anything SGLang pinned differently (torch above all).
"${pip[@]}" -e ".[$HARNESS_EXTRAS]"
"$VENV/bin/python" -c 'import importlib.metadata as m; print("sglang-install: sglang", m.version("sglang"), "torch", m.version("torch"))'
