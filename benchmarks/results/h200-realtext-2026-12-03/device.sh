#!/usr/bin/env bash
# One device call (run from the copied tree's root, .dev-hfmetrics/): wheels, the 8-layer model, then kit run of
# h200-realtext.yaml and h200-words.yaml (each stopped with SIGTERM at its share of the time: kit's clean,
# resumable path), every bundle to $OUT as a tarball plus its report, summary and telemetry summaries.
#   bash benchmarks/results/h200-realtext-2026-12-03/device.sh OUT SECONDS
set -uo pipefail
cd "$(dirname "$0")/../../.."
export PYTHONUNBUFFERED=1
OUT=$1
DEADLINE=$((SECONDS + $2))
R=benchmarks/results/h200-realtext-2026-12-03
TRUST=(--trust allowed_signers --trust .devkit/trust-runner)
site=$(python3 -c 'import site; print(site.getsitepackages()[0])')
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir ../.whl/*.whl whl/*.whl 2>&1 | tail -2
printf '%s\n' "$PWD" "$PWD/images/transformers" "$PWD/images/oea" > "$site/kit-dev.pth"
python3 -c 'import torch, transformers, prometheus_client, kit, kit_hf, kit_oea; print("setup:", torch.__version__, transformers.__version__, torch.cuda.get_device_name(0))'
python3 -m kit_hf.make_model qwen3-30b-a3b build/models/qwen3-30b-a3b-8l --layers 8 --dtype bfloat16 --device cuda 2>&1 | grep -v shards | tail -2
echo "setup done; $((DEADLINE - SECONDS)) s left"
gpu_line() { nvidia-smi --query-gpu=name,memory.used,utilization.gpu,clocks.sm,power.draw --format=csv,noheader; }
n=2
for m in h200-realtext h200-words; do
  share=$(( (DEADLINE - SECONDS - 20) / n )); n=$((n - 1))
  echo "GPU before $m: $(gpu_line); $share s for it"
  timeout -s TERM -k 40 "$share" python3 -m kit run "${TRUST[@]}" --key .devkit/runner --out build/results "$R/$m.yaml"
  echo "kit run $m exit $?"
  b=$(ls -d build/results/"$m"-*/ | head -n 1)
  tar -czf "$OUT/$m.tar.gz" -C build/results "$(basename "$b")"
  cp "$b/report.md" "$OUT/$m.report.md"; cp "$b/summary.json" "$OUT/$m.summary.json"
  mkdir -p "$OUT/$m-telemetry"
  for t in "$b"cells/*/level-*/telemetry.json; do c=${t#"$b"cells/}; cp "$t" "$OUT/$m-telemetry/${c//\//_}"; done 2>/dev/null
  python3 -m kit verify "${TRUST[@]}" "$b" | head -n 3
done
ls "$b" "$b"cells/* | head -30
echo "done with $((DEADLINE - SECONDS)) s left"
