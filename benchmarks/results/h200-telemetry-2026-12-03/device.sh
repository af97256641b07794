#!/usr/bin/env bash
# one device call: wheels, the 8-layer model, kit run of experiments/telemetry-h200.yaml, the bundle to $OUT
set -uo pipefail
cd "$(dirname "$0")"
export PYTHONUNBUFFERED=1
OUT=$1
START=$SECONDS
site=$(python3 -c 'import site; print(site.getsitepackages()[0])')
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir ../.whl/*.whl whl/*.whl 2>&1 | tail -2
printf '%s\n' "$PWD" "$PWD/images/transformers" > "$site/kit-dev.pth"
python3 -c 'import torch, transformers, prometheus_client, kit, kit_hf; print("setup:", torch.__version__, transformers.__version__, torch.cuda.get_device_name(0))'
python3 -m kit_hf.make_model qwen3-30b-a3b build/models/qwen3-30b-a3b-8l --layers 8 --dtype bfloat16 --device cuda 2>&1 | grep -v "shards" | tail -2
echo "setup done at $((SECONDS - START)) s"
nvidia-smi --query-gpu=name,memory.used,utilization.gpu,clocks.sm,power.draw --format=csv,noheader
timeout -s TERM -k 30 $((300 - (SECONDS - START))) python3 -m kit run --allow-unsigned --out build/results experiments/telemetry-h200.yaml
echo "kit run exit $? at $((SECONDS - START)) s"
b=$(ls -td build/results/*/ | head -n 1)
mkdir -p "$OUT/bundle"
( cd "$b" && tar -cf - --exclude='records.jsonl' --exclude='server.log' . ) | tar -xf - -C "$OUT/bundle"
tar -czf "$OUT/bundle.tar.gz" -C "$(dirname "$b")" "$(basename "$b")"
du -sh "$OUT"/*
