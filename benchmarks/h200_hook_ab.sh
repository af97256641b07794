#!/usr/bin/env bash
# Two versions of the OEA hook's kernels timed against each other in ONE device call (<= 10 minutes): the
# compiled GPU tests of the working tree's kernels, then benchmarks/oea_hook_overhead.py on the tree given as
# the baseline (a folder holding a kit_oea package, untracked so that it travels to the device: `mkdir abtmp &&
# git archive REV images/oea/kit_oea | tar -x -C abtmp --strip-components=2`) and on the working tree's
# images/oea, alternated ROUNDS times (base, new, base, new, ...), so that drift of the machine shows as a
# difference between rounds of the same tree, not as an effect. Run from the repository root:
#
#   bash benchmarks/h200_hook_ab.sh BASE_DIR OUT     (on the device: ... "$OUT")
#
# Writes OUT/env.txt, OUT/tests-*.log and OUT/tests-*.xml, OUT/{base,new}{1..ROUNDS}/ (the benchmark's json / md) and OUT/ab.log.
# BATCHES (default 32,64,128,256,512,1024), FORCED (default same,short), ROUNDS (default 2), TESTS (0: skip).
set -uo pipefail
cd "$(dirname "$0")/.."
BASE=$(cd "${1:?usage: benchmarks/h200_hook_ab.sh BASE_DIR OUT}" && pwd)
OUT=${2:?usage: benchmarks/h200_hook_ab.sh BASE_DIR OUT}
[ -d "$BASE/kit_oea" ] || { echo "$BASE has no kit_oea package" >&2; exit 2; }
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
PY=${PY:-python3}
common="$PWD:$PWD/benchmarks:$PWD/tests/oea"
. benchmarks/hook_common.sh

{
  hook_env
  echo "base: $BASE ($(sha256sum "$BASE/kit_oea/triton_oea.py" | cut -c1-16))"
  echo "new: images/oea ($(sha256sum images/oea/kit_oea/triton_oea.py | cut -c1-16))"
} 2>&1 | tee "$OUT/env.txt"

tests_rc=0
if [ "${TESTS:-1}" != 0 ]; then
  PYTHONPATH="$common:$PWD/images/oea" hook_tests "$OUT"
  tests_rc=$?
fi

for round in $(seq 1 "${ROUNDS:-2}"); do
  for tree in base new; do
    dir=$BASE
    [ "$tree" = new ] && dir=$PWD/images/oea
    t0=$SECONDS
    echo "$tree round $round: kit_oea from $(PYTHONPATH="$common:$dir" $PY -c 'import kit_oea; print(kit_oea.__file__)')"
    PYTHONPATH="$common:$dir" timeout 150 $PY benchmarks/oea_hook_overhead.py --out "$OUT/$tree$round" \
      --batches "${BATCHES:-32,64,128,256,512,1024}" --forced "${FORCED:-same,short}" --samples 21 \
      --max-seconds 120 > "$OUT/$tree$round.log" 2>&1
    echo "$tree round $round: exit $? in $((SECONDS - t0)) s"
    grep -E '^(glm5|qwen3) M=' "$OUT/$tree$round.log" | sed "s/^/  $tree$round /"
  done
done 2>&1 | tee "$OUT/ab.log"
exit "$tests_rc"
