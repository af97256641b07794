#!/usr/bin/env bash
# One device call from the repository root: wheels (.whl, carried), the 8-layer model, then a sequential
# kit run of h200-sequential.yaml (SIGTERM at the deadline: kit's clean, resumable path); the bundle to $OUT as a
# tarball with its report, summary and looks.   bash benchmarks/results/h200-sequential-2026-12-03/device.sh OUT SECONDS
set -uo pipefail
cd "$(dirname "$0")/../../.."
export PYTHONUNBUFFERED=1
OUT=$1
DEADLINE=$((SECONDS + $2))
R=benchmarks/results/h200-sequential-2026-12-03
TRUST=(--trust allowed_signers --trust .devkit/trust-runner)
site=$(python3 -c 'import site; print(site.getsitepackages()[0])')
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir .whl/*.whl 2>&1 | tail -2
printf '%s\n' "$PWD" "$PWD/images/transformers" "$PWD/images/oea" > "$site/kit-dev.pth"
python3 -c 'import torch, transformers, prometheus_client, kit, kit_hf, kit_oea; print("setup:", torch.__version__, transformers.__version__, torch.cuda.get_device_name(0))'
python3 -m kit_hf.make_model qwen3-30b-a3b build/models/qwen3-30b-a3b-8l --layers 8 --dtype bfloat16 --device cuda 2>&1 | grep -v shards | tail -2
echo "setup done; $((DEADLINE - SECONDS)) s left"
echo "GPU before: $(nvidia-smi --query-gpu=name,memory.used,utilization.gpu,clocks.sm,power.draw --format=csv,noheader)"
start=$SECONDS
timeout -s TERM -k 40 $((DEADLINE - SECONDS - 25)) python3 -m kit run "${TRUST[@]}" --key .devkit/runner --out build/results "$R/h200-sequential.yaml"
echo "kit run exit $? after $((SECONDS - start)) s"
b=$(ls -d build/results/h200-sequential-*/ | head -n 1)
tar -czf "$OUT/h200-sequential.tar.gz" -C build/results "$(basename "$b")"
cp "$b/report.md" "$OUT/report.md"; cp "$b/summary.json" "$OUT/summary.json"; cp -r "$b/looks" "$OUT/looks" 2>/dev/null
python3 -m kit verify "${TRUST[@]}" "$b" | head -n 6
echo "GPU after: $(nvidia-smi --query-gpu=name,memory.used --format=csv,noheader)"
echo "done with $((DEADLINE - SECONDS)) s left"
