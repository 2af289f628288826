#!/usr/bin/env bash
# Records PyTorch-profiler traces of the micro engine on a CUDA GPU, with CUDA graphs, for both
# variants (topk==1 fast path on, and off via --disable-topk1-fast-path), trims them small and
# summarizes the softmax kernels per graph launch and region. One go, no internet, no sglang.
#
#   OUT=/path/to/out scripts/gpu_record_micro_traces.sh
#
# Needs: torch with CUDA, and fastapi, uvicorn, httpx. Where those three are missing and there is no
# internet, build a wheelhouse on a machine that has one (`pip download fastapi uvicorn httpx -d
# shared/wheels`) and set WHEELHOUSE=shared/wheels: the script installs from it with --no-index.
# Output under $OUT:
#   raw/micro-{on,off}-bs{1,3}-TP-0.trace.json.gz   the traces as the server wrote them
#   fixtures/micro_cuda_{on,off}_bs{1,3}.trace.json.gz  trimmed copies (what tests/fixtures/ holds)
#   summary.json, server-{on,off}.log, env.txt
# Exit status: 0 when every expectation held (see check_summary below), 1 otherwise.
set -euo pipefail

cd "$(dirname "$0")/.."
OUT="${OUT:-$PWD/gpu_micro_traces}"
DEVICE="${DEVICE:-cuda}"          # DEVICE=cpu: a dry run of this script on a CPU machine (CPU ops, no graphs)
PYTHON="${PYTHON:-}"
if [[ -z "$PYTHON" ]]; then
  # The project's venv when its torch can drive $DEVICE (a CPU venv cannot drive cuda), else python3.
  if [[ -x .venv/bin/python ]] && .venv/bin/python -c "import sys, torch; sys.exit(0 if '$DEVICE' == 'cpu' or torch.cuda.is_available() else 1)" 2>/dev/null; then
    PYTHON=.venv/bin/python
  else
    PYTHON=python3
  fi
fi
NUM_STEPS="${NUM_STEPS:-3}"        # --speculative-num-steps
PROFILE_STEPS="${PROFILE_STEPS:-6}" # forward steps per profile (1 prefill + 5 decode cycles at bs 1)
mkdir -p "$OUT/raw" "$OUT/fixtures"

if [[ "$DEVICE" == cuda ]]; then
  "$PYTHON" -c "import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)" \
    || { echo "torch with CUDA is required (DEVICE=cpu for a dry run)" >&2; exit 1; }
fi
if ! "$PYTHON" -c "import fastapi, uvicorn, httpx" 2>/dev/null; then
  if [[ -n "${WHEELHOUSE:-}" ]]; then
    "$PYTHON" -m pip install -q --no-index --find-links "$WHEELHOUSE" fastapi uvicorn httpx
  else
    echo "fastapi, uvicorn and httpx are missing; set WHEELHOUSE to a directory of their wheels" >&2
    exit 1
  fi
fi
{
  "$PYTHON" -c "import torch, sys; print('python', sys.version.split()[0]); print('torch', torch.__version__, 'cuda', torch.version.cuda); print('gpu', torch.cuda.get_device_name(0) if torch.cuda.is_available() else None)"
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null || true
  git rev-parse HEAD 2>/dev/null || true
} > "$OUT/env.txt"
cat "$OUT/env.txt"

export OUT PYTHON NUM_STEPS PROFILE_STEPS DEVICE
PYTHONPATH="$PWD:$PWD/scripts${PYTHONPATH:+:$PYTHONPATH}" "$PYTHON" - <<'EOF'
import gzip, json, os, signal, subprocess, sys, time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx

from sglang_spec_harness.micro.trace_summary import summarize
from micro_client import free_port, generate, wait_healthy

out = Path(os.environ["OUT"])
python = os.environ["PYTHON"]
num_steps = int(os.environ["NUM_STEPS"])
profile_steps = int(os.environ["PROFILE_STEPS"])
device = os.environ["DEVICE"]
on_gpu = device == "cuda"
# Kept by the trim: what the harness's analysis and the fixture tests need.
KEEP_CATEGORIES = {"user_annotation", "gpu_user_annotation", "cuda_runtime", "cuda_driver", "kernel", "gpu_memcpy", "gpu_memset", "ac2g"}
KEEP_CPU_OPS = ("softmax", "argmax", "aten::max", "aten::topk")


def trim(src: Path, dst: Path) -> None:
    with gzip.open(src, "rt") as handle:
        data = json.load(handle)
    kept = []
    for event in data.get("traceEvents", []):
        category, name = event.get("cat"), event.get("name", "")
        if event.get("ph") == "M" or category in KEEP_CATEGORIES:
            kept.append(event)
        elif category == "cpu_op" and any(k in name for k in KEEP_CPU_OPS):
            event.get("args", {}).pop("Input Dims", None)
            kept.append(event)
    data["traceEvents"] = kept
    with gzip.open(dst, "wt", compresslevel=9) as handle:
        json.dump(data, handle, separators=(",", ":"))


summary = {}
outputs = {}
for variant in ("on", "off"):
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    flags = ["--device", device, "--port", str(port), "--cuda-graph-max-bs", "8", "--speculative-num-steps", str(num_steps)]
    if variant == "off":
        flags.append("--disable-topk1-fast-path")
    log = open(out / f"server-{variant}.log", "wb")
    server = subprocess.Popen([python, "-m", "sglang_spec_harness.micro.server", *flags], stdout=log, stderr=subprocess.STDOUT)
    try:
        wait_healthy(url, server, variant, 300, f"; see {out}/server-{variant}.log")
        generate(url, "warm up the graphs", 32)
        info = httpx.get(f"{url}/server_info").json()
        assert info["device"] == device and info["cuda_graph"] == on_gpu, info
        for label, concurrency in (("bs1", 1), ("bs3", 3)):
            profile = {
                "output_dir": str(out / "raw"), "num_steps": profile_steps, "activities": ["CPU", "GPU"],
                "with_stack": False, "record_shapes": False, "profile_prefix": f"micro-{variant}", "profile_id": label,
            }
            httpx.post(f"{url}/start_profile", json=profile, timeout=60).raise_for_status()
            prompts = [f"gpu trace prompt {i}" for i in range(concurrency)]
            with ThreadPoolExecutor(concurrency) as pool:
                bodies = list(pool.map(lambda p: generate(url, p, 96), prompts))
            outputs[(variant, label)] = [(b["output_ids"], b["meta_info"]["spec_verify_ct"]) for b in bodies]
            raw = out / "raw" / f"micro-{variant}-{label}-TP-0.trace.json.gz"
            deadline = time.monotonic() + 120
            while not raw.exists():
                if time.monotonic() > deadline:
                    sys.exit(f"no trace at {raw}")
                time.sleep(0.5)
            fixture = out / "fixtures" / f"micro_{device}_{variant}_{label}.trace.json.gz"
            trim(raw, fixture)
            result = summarize(fixture, op_names=("aten::_softmax",), kernel_pattern=r"SoftMax")
            summary[f"{variant}_{label}"] = {
                "fixture": fixture.name,
                "bytes": fixture.stat().st_size,
                "total_kernels": result.total_kernels,
                "softmax_kernels_outside_spans": result.kernels_outside_spans,
                "modes": {
                    mode: {
                        "spans": [s.name for s in spans],
                        "graph_launches": [s.graph_launches for s in spans],
                        "softmax_kernels": [s.kernels for s in spans],
                        "softmax_kernels_in_graphs": [s.kernels_in_graphs for s in spans],
                        "softmax_cpu_ops": [s.ops for s in spans],
                    }
                    for mode, spans in result.by_mode().items()
                },
            }
        summary[f"{variant}_server_info"] = httpx.get(f"{url}/server_info").json()
    finally:
        server.send_signal(signal.SIGTERM)
        try:
            server.wait(60)
        except subprocess.TimeoutExpired:
            server.kill()
        log.close()

summary["outputs_identical"] = all(outputs[("on", l)] == outputs[("off", l)] for l in ("bs1", "bs3"))
(out / "summary.json").write_text(json.dumps(summary, indent=1))


def check_summary() -> list[str]:
    """Expectations: graph launches in every region; softmax kernels inside draft graphs only when off."""
    problems = []
    if not summary["outputs_identical"]:
        problems.append("greedy outputs differ between the variants")
    for label in ("bs1", "bs3"):
        for variant in ("on", "off"):
            modes = summary[f"{variant}_{label}"]["modes"]
            for mode in ("DECODE", "TARGET_VERIFY", "DRAFT_EXTEND_V2"):
                launches = modes.get(mode, {}).get("graph_launches", [])
                if not launches or not all(n == (1 if on_gpu else 0) for n in launches):
                    problems.append(f"{variant} {label}: expected {int(on_gpu)} cudaGraphLaunch per {mode} span, got {launches}")
            if on_gpu:
                decode = modes.get("DECODE", {}).get("softmax_kernels_in_graphs", [])
                extend_in = modes.get("DRAFT_EXTEND_V2", {}).get("softmax_kernels_in_graphs", [])
                extend_all = modes.get("DRAFT_EXTEND_V2", {}).get("softmax_kernels", [])
            else:  # the dry run checks CPU ops: the graph-body softmax counts as "in graph"
                decode = modes.get("DECODE", {}).get("softmax_cpu_ops", [])
                extend_all = modes.get("DRAFT_EXTEND_V2", {}).get("softmax_cpu_ops", [])
                extend_in = [n // 2 for n in extend_all]
            want_decode, want_in, want_all = (0, 0, 0) if variant == "on" else (num_steps - 1, 1, 2)
            if any(n != want_decode for n in decode):
                problems.append(f"{variant} {label}: DECODE softmax kernels in graphs {decode}, expected {want_decode} each")
            if any(n != want_in for n in extend_in) or any(n != want_all for n in extend_all):
                problems.append(f"{variant} {label}: DRAFT_EXTEND_V2 softmax kernels {extend_all} (in graphs {extend_in}), expected {want_all} ({want_in})")
            verify = modes.get("TARGET_VERIFY", {}).get("softmax_kernels" if on_gpu else "softmax_cpu_ops", [])
            if any(verify):
                problems.append(f"{variant} {label}: softmax kernels in TARGET_VERIFY {verify}")
    return problems


problems = check_summary()
for key in sorted(k for k in summary if k.endswith(("bs1", "bs3"))):
    entry = summary[key]
    shown = "softmax_kernels_in_graphs" if on_gpu else "softmax_cpu_ops"
    print(key, entry["fixture"], f"{entry['bytes']} bytes", shown, {m: v[shown] for m, v in entry["modes"].items()})
print("outputs identical:", summary["outputs_identical"])
if problems:
    print("EXPECTATIONS FAILED:\n  " + "\n  ".join(problems))
    sys.exit(1)
print("all expectations held")
EOF
