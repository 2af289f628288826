#!/usr/bin/env bash
# The GPU workflows' inputs (from the environment, as the workflow passes them: never pasted into a
# script) checked and handed to the make targets: scripts/ci_inputs.sh STEP, one per workflow step.
#   plan          SCENARIO SET GATE ONLY RUNS_ON SGLANG_VERSION: checked, then `make scenario-plan` (the
#                 scenario and the --set overrides planned, nothing started); writes `key` to $GITHUB_OUTPUT
#   install-kind  SGLANG_REF SGLANG_SPEC SGLANG_PATH: `make sglang-install-kind`; writes `kind`
#   install       the same: `make sglang-install` (a ref is the checkout in .sglang-src)
#   run           SCENARIO SET ONLY SGLANG_VERSION: `make scenario-run`, whose exit code the gate reads later
# A value that could reach make's or a shell's command line as code is refused (exit 2, one line).
set -euo pipefail
cd "$(dirname "$0")/.."

fail() { echo "::error::$*" >&2; exit 2; }  # stderr: it may run inside $(...)
output() { if [ -n "${GITHUB_OUTPUT:-}" ]; then echo "$1" >> "$GITHUB_OUTPUT"; fi; echo "$1"; }

check_scenario() {
  # a path, a shipped name, or sglang:PATH; never `..` (out of either checkout)
  [[ "$SCENARIO" =~ ^(sglang:)?[A-Za-z0-9_][A-Za-z0-9_./-]*$ ]] && [[ "$SCENARIO" != *..* ]] \
    || fail "scenario: not a path, a shipped name or sglang:PATH: $SCENARIO"
}

check_plain() {  # NAME VALUE: no quote, dollar, backtick or backslash (it is quoted on make's command line)
  [[ "$2" != *[\"\$\`\\]* ]] && [[ "$2" != *$'\n'* ]] || fail "$1: quotes, \$, backticks, backslashes and newlines are not allowed: $2"
}

run_args() {  # --only exact, --set server.sglang_version=X
  local args=""
  case "${ONLY:-exact}" in
    exact) args="--only exact" ;;
    all) ;;
    *) fail "only: expected exact or all, got: $ONLY" ;;
  esac
  if [ -n "${SGLANG_VERSION:-}" ]; then
    [[ "$SGLANG_VERSION" =~ ^[A-Za-z0-9.+-]+$ ]] || fail "sglang_version: not a version: $SGLANG_VERSION"
    args="$args --set server.sglang_version=$SGLANG_VERSION"
  fi
  echo "$args"
}

write_sets() {  # the `set` input, one PATH=VALUE per line, into the file make reads them from
  mkdir -p reports
  printf '%s\n' "${SET:-}" > reports/set.txt
}

runner_labels() {  # RUNS_ON: a JSON list of labels -> the labels, space-separated
  RUNS_ON="$RUNS_ON" python3 -c '
import json, os, re, sys
try:
    labels = json.loads(os.environ["RUNS_ON"])
except ValueError:
    labels = None
if not (isinstance(labels, list) and labels and all(isinstance(x, str) and re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.-]*", x) for x in labels)):
    sys.exit(1)
print(" ".join(labels))' || fail "runs_on: expected a JSON list of runner labels, e.g. [\"1-gpu-h100\"], got: $RUNS_ON"
}

plan() {
  check_scenario
  case "${GATE:-}" in pr | nightly) ;; *) fail "gate: expected pr or nightly, got: ${GATE:-}" ;; esac
  local labels args
  labels=$(runner_labels)
  args=$(run_args)
  if [[ "$SCENARIO" == sglang:* ]] && [ ! -d .sglang-src ]; then
    fail "scenario $SCENARIO is a file of the SGLang checkout: give sglang_ref"
  fi
  write_sets
  # shellcheck disable=SC2086  # RUN_ARGS holds flags of our own making
  make -s scenario-plan SCENARIO="$SCENARIO" SET_FILE=reports/set.txt RUN_ARGS="$args"
  # names the run's artifacts and its pull-request comment: one per scenario and runner
  output "key=$(printf '%s-%s' "${SCENARIO#sglang:}" "${labels// /-}" | tr -c 'A-Za-z0-9_.-' '-')"
}

sglang_source() {  # the make variables of the SGLang source: a ref is the checkout the workflow made
  check_plain sglang_spec "${SGLANG_SPEC:-}"
  check_plain sglang_path "${SGLANG_PATH:-}"
  if [ -n "${SGLANG_REF:-}" ]; then
    echo "SGLANG_PATH=.sglang-src SGLANG_REF= SGLANG_SPEC="
  else
    echo "SGLANG_REF="
  fi
}

case "${1:-}" in
  plan) plan ;;
  install-kind)
    src=$(sglang_source)
    read -r -a source <<< "$src"
    kind=$(make -s sglang-install-kind "${source[@]}")
    echo "sglang-install: $kind"
    output "kind=${kind%% *}"
    ;;
  install)
    src=$(sglang_source)
    read -r -a source <<< "$src"
    make sglang-install "${source[@]}"
    ;;
  run)
    check_scenario
    args=$(run_args)
    write_sets
    make scenario-run SCENARIO="$SCENARIO" SET_FILE=reports/set.txt RUN_ARGS="$args" || true
    ;;
  *)
    echo "usage: scripts/ci_inputs.sh plan|install-kind|install|run" >&2
    exit 2
    ;;
esac
