#!/usr/bin/env bash
# The OEA hook's kernels on one GPU in ONE device call (<= 10 minutes): the GPU tests of tests/oea, then the
# hook's overhead over plain top-k with the split path's kernels side by side. Run from the repository root
# of a checkout of the branch under test:
#
#   bash benchmarks/h200_hook.sh OUT        (on the device: bash benchmarks/h200_hook.sh "$OUT")
#
# Writes OUT/env.txt (GPU, driver, torch / triton versions, git revision), OUT/tests-*.log and OUT/tests-*.xml
# (tests/oea/test_triton_oea.py and tests/oea/test_oea_gpu.py, compiled, every tier), OUT/hook/
# (benchmarks/oea_hook_overhead.py: oea_hook_overhead.json / .md) and OUT/bench.log. Each step is bounded;
# the benchmark runs even when tests fail (its own reference check marks any MISMATCH per cell), and the
# script's exit status is the tests' (0 only if they all passed) unless the benchmark itself failed.
#
# The benchmark's forced variants (FORCED=a,b,... to choose others; see FORCED in the benchmark): the default
# over each of the three routers, twice (oea / same over torch ops, short / same-short over torch.topk, fused /
# same-fused over one fused Triton kernel, as sglang's gates: docs/oea-hook.md's table), and the default with
# each row's top-k found by tl.topk instead of K max rounds (KIT_OEA_SELECT=topk) over each router (topk,
# topk-short, topk-fused).
#
# ONLY_ON=H200 runs nothing unless the GPU is one. With little device time: TESTS_S / TESTS_K bound and filter the tests (benchmarks/hook_common.sh), BENCH_S the
# benchmark's --max-seconds (default 200; it stops starting cells after that), FORCED its variants.
#
# Needs on the device: python3 with torch (CUDA), triton, numpy, pytest (as the 2026-12-03 calls had).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${1:?usage: benchmarks/h200_hook.sh OUT}
mkdir -p "$OUT/hook"
export PYTHONUNBUFFERED=1
export PYTHONPATH="$PWD:$PWD/images/oea:$PWD/benchmarks:$PWD/tests/oea${PYTHONPATH:+:$PYTHONPATH}"
PY=${PY:-python3}
. benchmarks/hook_common.sh

hook_env 2>&1 | tee "$OUT/env.txt"
# ONLY_ON=H200: run nothing (exit 3) unless the GPU's name holds it: a call for an H200 that got another card costs
# its start only, not a full run whose timings could not fill the table asked for
if [ -n "${ONLY_ON:-}" ] && ! nvidia-smi --query-gpu=name --format=csv,noheader | grep -q -- "$ONLY_ON"; then
  echo "not an $ONLY_ON: nothing run"
  exit 3
fi
hook_tests "$OUT"
tests_rc=$?

t0=$SECONDS
timeout $((${BENCH_S:-200} + 70)) $PY benchmarks/oea_hook_overhead.py --out "$OUT/hook" \
  --forced "${FORCED:-same,short,same-short,fused,same-fused,topk,topk-short,topk-fused}" \
  --samples 21 --max-seconds "${BENCH_S:-200}" > "$OUT/bench.log" 2>&1
bench_rc=$?
echo "benchmark: exit $bench_rc in $((SECONDS - t0)) s"
grep -E '^- ' "$OUT/bench.log" || tail -n 20 "$OUT/bench.log"
[ "$bench_rc" -ne 0 ] && exit "$bench_rc"
exit "$tests_rc"
