#!/usr/bin/env bash
# The H200 runs of the real-engine issue, as they were made: one device call runs `setup` and then the
# steps it has time for; every call is at most 10 minutes, so a long `kit run` is stopped with SIGTERM
# (kit's clean path: server stopped, bundle signed, resumable) and continued with `resume` in the next call.
#
#   benchmarks/h200_session.sh setup             carried wheels into the device's Python, kit + kit_hf + kit_oea
#                                                on its path (a .pth file), the 8-layer model made on the GPU
#   benchmarks/h200_session.sh known OUT         the known answer without kit: moe_decode_step.py, eager decode
#                                                step (no CUDA graph, as transformers serve runs), grouped_mm
#   benchmarks/h200_session.sh kernels OUT       the OEA kernels: their GPU tests, the hook's overhead over plain
#                                                top-k (oea_hook_overhead.py), moe_decode_step.py with and without
#                                                CUDA graphs (needs only `setup nomodel`)
#   benchmarks/h200_session.sh profile OUT       oea_eager_profile.py: host time and syncs of an eager decode step
#   benchmarks/h200_session.sh run MANIFEST SECONDS OUT     kit run for at most SECONDS, then the bundle to OUT
#   benchmarks/h200_session.sh resume SECONDS OUT [TAR]     kit run --resume of the bundle (from TAR when the
#                                                machine is a fresh one), then the bundle to OUT
#   benchmarks/h200_session.sh runs SECONDS OUT MANIFEST...  setup, then kit run of each manifest in turn, each
#                                                stopped with SIGTERM at its share of SECONDS; each bundle to
#                                                OUT/<name>.tar.gz with its report, summary, looks and the levels'
#                                                telemetry summaries (one device call)
#
# Needs, in the working tree: .whl/ (cp312 manylinux wheels: pydantic, jsonschema, cryptography, docker,
# locust and its gevent stack, transformers 5.24.0, fastapi, uvicorn, openai, ...), and .devkit/ with the
# runner key that signs the bundle (runner_ed25519) and the trust file naming it for kit-bundle
# (trust-runner): the same key across calls, so that a fresh machine can resume a bundle an earlier one signed.
set -euo pipefail
cd "$(dirname "$0")/.."
export PYTHONUNBUFFERED=1
PY=python3
MODEL=build/models/qwen3-30b-a3b-8l
BUNDLES=build/results
TRUST=(--trust allowed_signers --trust .devkit/trust-runner)

gpu_line() { nvidia-smi --query-gpu=name,memory.used,utilization.gpu,clocks.sm,temperature.gpu,power.draw --format=csv,noheader; }

setup() {
  local site
  site=$($PY -c 'import site; print(site.getsitepackages()[0])')
  $PY -m pip install -q --no-index --no-deps --no-compile --no-cache-dir .whl/*.whl
  printf '%s\n' "$PWD" "$PWD/images/transformers" "$PWD/images/oea" > "$site/kit-dev.pth"
  $PY -c 'import torch, transformers, triton, kit, kit_hf, kit_oea; print("setup:", torch.__version__, "transformers", transformers.__version__, "triton", triton.__version__, "kit", kit.__version__, torch.cuda.get_device_name(0))'
  [ "${1:-}" = nomodel ] && return 0
  local t0=$SECONDS
  $PY -m kit_hf.make_model qwen3-30b-a3b "$MODEL" --layers 8 --dtype bfloat16 --device cuda --print-digest
  echo "setup: model in $((SECONDS - t0)) s; GPU: $(gpu_line)"
}

known() {
  $PY benchmarks/moe_decode_step.py --out "$1" --layers 8 --impls grouped_mm --parts step --batches 1,4 \
    --no-graph --cell-seconds 3 --max-seconds 60
}

kernels() {  # each step bounded; if the kernel tests fail, the benchmarks still finish (short barrier waits)
  if ! timeout 150 $PY -m pytest -q -p no:cacheprovider -m "gpu or slow or not slow" tests/oea/test_triton_oea.py \
      tests/oea/test_oea_gpu.py; then
    export KIT_OEA_MAX_SPIN=256
    echo "kernel tests failed or timed out: the benchmarks below run with KIT_OEA_MAX_SPIN=256"
  fi
  timeout 170 $PY benchmarks/oea_hook_overhead.py --out "$1/hook" --max-seconds 120 || echo "hook benchmark exit $?"
  timeout 130 $PY benchmarks/moe_decode_step.py --out "$1/graph" --layers 8 --batches 16,1,4,64 \
    --impls grouped_mm,batched_mm --oea-paths auto,split --cell-seconds 3 --max-seconds 90 || echo "graph exit $?"
  timeout 70 $PY benchmarks/moe_decode_step.py --out "$1/eager" --layers 8 --batches 1,4,16,64 \
    --impls grouped_mm,batched_mm --parts step --no-graph --cell-seconds 2 --max-seconds 40 || echo "eager exit $?"
}

profile() {
  for b in 1 4; do
    timeout 90 $PY benchmarks/oea_eager_profile.py --out "$1/profile-b$b" --batch "$b" --impl grouped_mm --steps 20
  done
}

bundle_out() {  # the newest bundle as a tarball (the results folder is too deep to come back as files)
  local b
  b=$(ls -td "$BUNDLES"/*/ | head -n 1)
  tar -czf "$1/bundle.tar.gz" -C "$(dirname "$b")" "$(basename "$b")"
  echo "bundle: $b -> $1/bundle.tar.gz ($(du -h "$1/bundle.tar.gz" | cut -f1))"
  $PY -m kit verify "${TRUST[@]}" "$b" || true
  echo "GPU after: $(gpu_line)"
}

run() {
  echo "GPU before: $(gpu_line)"
  set +e
  timeout -s TERM -k 90 "$2" $PY -m kit run "${TRUST[@]}" --key .devkit/runner_ed25519 --out "$BUNDLES" "$1"
  echo "kit run exit: $?"
  set -e
  bundle_out "$3"
}

resume() {
  if [ -n "${3:-}" ] && ! ls -d "$BUNDLES"/*/ >/dev/null 2>&1; then
    mkdir -p "$BUNDLES" && tar -xzf "$3" -C "$BUNDLES"
  fi
  local b
  b=$(ls -td "$BUNDLES"/*/ | head -n 1)
  echo "GPU before: $(gpu_line)"
  set +e
  timeout -s TERM -k 90 "$1" $PY -m kit run "${TRUST[@]}" --key .devkit/runner_ed25519 --resume "$b"
  echo "kit run --resume exit: $?"
  set -e
  bundle_out "$2"
}

runs() {  # SECONDS OUT MANIFEST...: one call's worth of kit runs, after setup
  local deadline=$((SECONDS + $1)) out=$2 n m name b share t c
  shift 2
  setup
  n=$#
  for m in "$@"; do
    name=$(basename "$m" .yaml)
    share=$(( (deadline - SECONDS - 20) / n )); n=$((n - 1))
    echo "GPU before $name: $(gpu_line); $share s for it"
    set +e
    timeout -s TERM -k 40 "$share" $PY -m kit run "${TRUST[@]}" --key .devkit/runner --out "$BUNDLES" "$m"
    echo "kit run $name exit $?"
    set -e
    b=$(ls -td "$BUNDLES/$name"-*/ | head -n 1)
    tar -czf "$out/$name.tar.gz" -C "$BUNDLES" "$(basename "$b")"
    cp "$b/report.md" "$out/$name.report.md" 2>/dev/null || true
    cp "$b/summary.json" "$out/$name.summary.json" 2>/dev/null || true
    [ -d "$b/looks" ] && cp -r "$b/looks" "$out/$name-looks"
    mkdir -p "$out/$name-telemetry"
    for t in "$b"cells/*/level-*/telemetry.json; do
      [ -f "$t" ] || continue
      c=${t#"$b"cells/}; cp "$t" "$out/$name-telemetry/${c//\//_}"
    done
    $PY -m kit verify "${TRUST[@]}" "$b" | head -n 4 || true
  done
  echo "GPU after: $(gpu_line); done with $((deadline - SECONDS)) s left"
}

"$@"
