#!/usr/bin/env bash
# The H200 runs that check the sign of kit's verdicts against answers measured without kit, as one resumable
# job that any number of device calls can continue (each call is at most 10 minutes):
#
#   benchmarks/h200_signs.sh OUT SECONDS
#
# does, within SECONDS of wall time, whatever is not done yet, in this order:
#   1. setup (benchmarks/h200_session.sh setup: carried wheels, kit/kit_hf/kit_oea on the path, the model)
#   2. the known answers without kit (moe_decode_step.py, eager decode steps, no CUDA graph, as the servers
#      run): grouped_mm and eager experts at batch 1 and 4 with the Triton kernels, grouped_mm at batch 1 with
#      KIT_OEA_IMPL=torch; kept as OUT/known.tar.gz
#   3. kit run (or kit run --resume) of experiments/transformers-h200-eager.yaml, then of
#      experiments/transformers-h200-signs.yaml; a run still going at the deadline gets SIGTERM (kit's clean
#      path: server stopped, bundle signed and resumable) and the next call resumes it
# and leaves every bundle as OUT/<name>.tar.gz. On a fresh machine, bundles an earlier call returned are taken
# from .devkit/bundles/<name>.tar.gz (copy them there, carry .devkit). Needs .whl/ and .devkit/ (runner key
# and trust line) as benchmarks/h200_session.sh describes.
set -uo pipefail
cd "$(dirname "$0")/.."
export PYTHONUNBUFFERED=1
OUT=$1
DEADLINE=$((SECONDS + $2))
PY=python3
BUNDLES=build/results
TRUST=(--trust allowed_signers --trust .devkit/trust-runner)
MANIFESTS=(experiments/transformers-h200-eager.yaml experiments/transformers-h200-signs.yaml)
mkdir -p "$OUT" "$BUNDLES"

left() { echo $((DEADLINE - SECONDS)); }
gpu_line() { bash benchmarks/h200_session.sh gpu_line; }  # the one GPU line, as the session script prints it

if ! $PY -c 'import kit, kit_hf, kit_oea, locust' 2>/dev/null || [ ! -f build/models/qwen3-30b-a3b-8l/kit-model.json ]; then
  bash benchmarks/h200_session.sh setup || { echo "setup failed"; exit 1; }
fi
echo "cpus: $(nproc); topology (cpu core socket):"; lscpu -e=CPU,CORE,SOCKET 2>/dev/null | tr '\n' ';'; echo

if [ ! -f build/known/done ]; then
  mkdir -p build/known
  timeout 150 $PY benchmarks/moe_decode_step.py --out build/known/triton --layers 8 --impls grouped_mm,eager \
    --parts step --batches 1,4 --no-graph --cell-seconds 3 --max-seconds 100 || echo "known (triton) exit $?"
  KIT_OEA_IMPL=torch timeout 80 $PY benchmarks/moe_decode_step.py --out build/known/torch --layers 8 \
    --impls grouped_mm --parts step --batches 1 --no-graph --cell-seconds 3 --max-seconds 40 || echo "known (torch) exit $?"
  touch build/known/done
  tar -czf "$OUT/known.tar.gz" -C build known
fi

for manifest in "${MANIFESTS[@]}"; do
  name=$(basename "$manifest" .yaml)
  bundle=$(ls -d "$BUNDLES/$name"-*/ 2>/dev/null | head -n 1)
  if [ -z "$bundle" ] && [ -f ".devkit/bundles/$name.tar.gz" ]; then
    tar -xzf ".devkit/bundles/$name.tar.gz" -C "$BUNDLES"
    bundle=$(ls -d "$BUNDLES/$name"-*/ 2>/dev/null | head -n 1)
  fi
  status=$([ -n "$bundle" ] && $PY -c 'import json,sys; print(json.load(open(sys.argv[1]))["status"])' "$bundle/run.json")
  if [ "$status" != complete ] && [ "$(left)" -gt 60 ]; then
    echo "GPU before $name: $(gpu_line); $(left) s left"
    if [ -n "$bundle" ]; then
      timeout -s TERM -k 60 $(($(left) - 45)) $PY -m kit run "${TRUST[@]}" --key .devkit/runner_ed25519 --resume "$bundle"
    else
      timeout -s TERM -k 60 $(($(left) - 45)) $PY -m kit run "${TRUST[@]}" --key .devkit/runner_ed25519 --out "$BUNDLES" "$manifest"
    fi
    echo "kit run $name exit: $?; GPU after: $(gpu_line)"
    bundle=$(ls -d "$BUNDLES/$name"-*/ 2>/dev/null | head -n 1)
  fi
  if [ -n "$bundle" ]; then
    tar -czf "$OUT/$name.tar.gz" -C "$BUNDLES" "$(basename "$bundle")"
    $PY -m kit verify "${TRUST[@]}" "$bundle" | head -n 3
  fi
done
echo "done with $(left) s left"
