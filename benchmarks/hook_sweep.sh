#!/usr/bin/env bash
# Kernel B's layout at the hook's thinnest cell (GLM-5, 128-362 rows), each candidate timed twice, interleaved, in
# ONE device call: bash benchmarks/hook_sweep.sh OUT. Each line of OUT/sweep.txt is one knob setting's run of
# benchmarks/oea_hook_overhead.py over three routers (us over plain routing). ONLY_ON=H200 runs nothing elsewhere.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${1:?usage: benchmarks/hook_sweep.sh OUT}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD:$PWD/images/oea:$PWD/benchmarks${PYTHONPATH:+:$PYTHONPATH}"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$OUT/env.txt"
if [ -n "${ONLY_ON:-}" ] && ! grep -q -- "$ONLY_ON" "$OUT/env.txt"; then echo "not an $ONLY_ON: nothing run"; exit 3; fi
CONFIGS=${CONFIGS:-"default KIT_OEA_UNION=sets KIT_OEA_SPLIT_ROWS=2 KIT_OEA_SPLIT_ROWS=2,KIT_OEA_SELECT=rounds KIT_OEA_SPLIT_WARPS=4 KIT_OEA_SPLIT_WARPS=8"}
for rep in 1 2; do
  for cfg in $CONFIGS; do
    envs=(); [ "$cfg" != default ] && IFS=, read -ra envs <<< "$cfg"
    t0=$SECONDS
    env "${envs[@]}" timeout 60 python3 benchmarks/oea_hook_overhead.py --shapes glm5 --batches "${BATCHES:-128,256}" \
      --forced same,short,fused --samples 21 --max-seconds 40 > "$OUT/run-$rep-$cfg.log" 2>&1
    echo "rep $rep $cfg: exit $? in $((SECONDS - t0)) s" | tee -a "$OUT/sweep.txt"
    grep -E '^glm5 M=' "$OUT/run-$rep-$cfg.log" | sed "s/^/  /" | tee -a "$OUT/sweep.txt"
  done
done
