#!/usr/bin/env bash
# Every GPU check of the project in one go, for a machine that has torch with CUDA but maybe not the
# harness's other dependencies, no SGLang and no internet (a lent GPU box, a fresh GPU runner):
#   1. scripts/gpu_record_micro_traces.sh: the micro engine's CUDA-graph traces, both variants, bs 1
#      and 3, trimmed into fixtures, with their per-replay softmax-kernel counts checked;
#   2. `harness run scenarios/micro_topk1_gpu.yaml`: the whole pipeline (interleaved warm servers,
#      GPU profiler, kernel counts per graph replay, accept length, outputs, TPOT, report) on CUDA;
#   3. `harness analyze` of one recorded fixture: the CLI's view of a real CUDA-graph trace;
#   4. graphs against eager: the same greedy requests to a server with CUDA graphs and one without
#      (--disable-cuda-graph) give the same outputs and the same accept length;
#   5. with AA=1, an A/A run of the GPU scenario (`harness run --aa`): the noise floor on this GPU.
# Results are packed into at most three files under $OUT (a device tool returns a few files only):
#   gpu_fixtures.tar.gz  (trimmed traces, summary.json, env.txt, server logs), gpu_run.tar.gz (the run
#   directory, raw traces left out when large), gpu_checks.log. Exit 0 only when all three held.
#   WHEELHOUSE=.whl OUT=/tmp/gpu scripts/gpu_checks.sh
set -uo pipefail
cd "$(dirname "$0")/.."
OUT="${OUT:-$PWD/gpu_checks_out}"
PYTHON="${PYTHON:-python3}"
WORK="$(mktemp -d)"
mkdir -p "$OUT"
exec > >(tee "$OUT/gpu_checks.log") 2>&1

if [[ -n "${WHEELHOUSE:-}" ]]; then
  # Wheels for what the image lacks, into a folder of their own, in front of the image's packages.
  "$PYTHON" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$WORK/site" "$WHEELHOUSE"/*.whl \
    || { echo "gpu_checks: installing the wheels of $WHEELHOUSE failed" >&2; exit 1; }
  export PYTHONPATH="$WORK/site"
fi
export PYTHONPATH="$PWD:$PWD/scripts${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
harness() { "$PYTHON" -m sglang_spec_harness.commands.cli "$@"; }
status=0
started=$SECONDS

echo "== 1/3 micro-engine CUDA-graph traces ($(date -u +%T))"
OUT="$WORK/traces" PYTHON="$PYTHON" timeout 240 scripts/gpu_record_micro_traces.sh || { echo "gpu_checks: the trace recording failed"; status=1; }
tar -czf "$OUT/gpu_fixtures.tar.gz" -C "$WORK/traces" --exclude raw . 2>/dev/null

echo "== 2/3 harness run scenarios/micro_topk1_gpu.yaml ($(date -u +%T), $((SECONDS - started)) s in)"
timeout 300 "$PYTHON" -m sglang_spec_harness.commands.cli run scenarios/micro_topk1_gpu.yaml --out "$WORK/runs" --no-progress ${RUN_ARGS:-}
rc=$?
echo "harness run exited $rc"
[[ $rc -eq 0 ]] || status=1
run_dir=$(ls -d "$WORK"/runs/*/ 2>/dev/null | head -1)
if [[ -n "$run_dir" ]]; then
  # The whole run when it is small; else without the raw traces (their analysis.json stays).
  tar -czf "$OUT/gpu_run.tar.gz" -C "$WORK/runs" .
  if (( $(stat -c %s "$OUT/gpu_run.tar.gz") > 15000000 )); then
    tar -czf "$OUT/gpu_run.tar.gz" -C "$WORK/runs" --exclude '*.trace.json*' --exclude '*.pt.trace.json*' .
  fi
fi

echo "== 3/3 harness analyze of a recorded fixture ($(date -u +%T), $((SECONDS - started)) s in)"
fixture=$(ls "$WORK"/traces/fixtures/*off_bs3* 2>/dev/null | head -1)
if [[ -n "$fixture" ]]; then
  harness analyze "$fixture" || { echo "gpu_checks: harness analyze failed on $fixture"; status=1; }
else
  echo "gpu_checks: no fixture to analyze"; status=1
fi
echo "== 4/5 CUDA graphs against eager ($(date -u +%T), $((SECONDS - started)) s in)"
DEVICE="${DEVICE:-cuda}" timeout 240 "$PYTHON" - <<'PY' || { echo "gpu_checks: graphs and eager disagree"; status=1; }
import os, signal, subprocess, sys
from concurrent.futures import ThreadPoolExecutor

from micro_client import free_port, generate, wait_healthy

device = os.environ["DEVICE"]
flags = ["--device", device, "--speculative-num-steps", "3", "--cuda-graph-max-bs", "8", "--vocab-size", "128256"]
servers = {}
for name, extra in (("graphs", []), ("eager", ["--disable-cuda-graph"])):
    port = free_port()
    servers[name] = (f"http://127.0.0.1:{port}", subprocess.Popen(
        [sys.executable, "-m", "sglang_spec_harness.micro.server", *flags, *extra, "--port", str(port)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
try:
    for name, (url, proc) in servers.items():
        wait_healthy(url, proc, name, 180)

    def run(url, prompt):
        out = generate(url, prompt, 64)
        return out["output_ids"], out["meta_info"]["spec_verify_ct"]
    prompts = [f"graphs against eager {i} " * (1 + i % 3) for i in range(8)]
    results = {}
    for name, (url, _) in servers.items():
        with ThreadPoolExecutor(8) as pool:  # one batch of 8: the padded bs-8 graph
            results[name] = list(pool.map(lambda p: run(url, p), prompts))
    for name, rows in results.items():
        tokens = sum(len(ids) for ids, _ in rows)
        cycles = sum(ct for _, ct in rows)
        print(f"{name}: {tokens} tokens in {cycles} verify cycles, accept length {tokens / cycles:.3f}")
    same = sum(a[0] == b[0] for a, b in zip(results["graphs"], results["eager"]))
    print(f"outputs identical: {same}/{len(prompts)}")
    sys.exit(0 if same == len(prompts) and results["graphs"] == results["eager"] else 1)
finally:
    for _, proc in servers.values():
        proc.send_signal(signal.SIGTERM)
        proc.wait(60)
PY

if [[ "${AA:-0}" == 1 ]]; then
  echo "== 5/5 A/A run of the GPU scenario ($(date -u +%T), $((SECONDS - started)) s in)"
  timeout 300 "$PYTHON" -m sglang_spec_harness.commands.cli run scenarios/micro_topk1_gpu.yaml --aa --out "$WORK/aa" --no-progress ${RUN_ARGS:-}
  echo "harness run --aa exited $? (its aa_noise_floor line is the figure)"
  aa_dir=$(ls -d "$WORK"/aa/*/ 2>/dev/null | head -1)
  [[ -n "$aa_dir" ]] && tar -czf "$OUT/gpu_aa.tar.gz" -C "$WORK/aa" --exclude '*.trace.json*' .
fi
echo "== done in $((SECONDS - started)) s, status $status"
exit $status
