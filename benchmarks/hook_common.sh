# Sourced by benchmarks/h200_hook.sh and benchmarks/h200_hook_ab.sh (from the repository root, PY set): what both
# print about the machine, and the OEA kernels' GPU tests, run once.

# The date, the checkout, the GPU, driver and clock, and the torch / CUDA / Triton versions.
hook_env() {
  echo "date: $(date -u +%FT%TZ)"
  echo "git: $(git rev-parse HEAD 2>/dev/null || echo unknown) $(git status --porcelain 2>/dev/null | wc -l) changed files"
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader || true
  $PY -c 'import torch, triton; print("torch", torch.__version__, "cuda", torch.version.cuda, "triton", triton.__version__, torch.cuda.get_device_name(0))'
}

# hook_tests OUT: tests/oea/test_triton_oea.py and tests/oea/test_oea_gpu.py, compiled, every tier, on the
# kit_oea that PYTHONPATH names, the two files side by side (Triton's compiles are most of the time, on the CPU),
# into OUT/tests-*.log and OUT/tests-*.xml (bounded: 300 s each, so that h200_hook.sh fits one device call;
# TESTS_S another bound, TESTS_K a pytest -k expression: a call with little device time left);
# prints each file's exit status (124: out of time) and summary, and returns nonzero if either failed.
hook_tests() {
  local t0=$SECONDS rc=0 i f
  local files=(test_triton_oea test_oea_gpu) pids=() codes=()
  for f in "${files[@]}"; do
    timeout "${TESTS_S:-300}" $PY -m pytest -q -p no:cacheprovider -m "gpu or slow or not slow" -rfE \
      --junitxml "$1/tests-$f.xml" ${TESTS_K:+-k "$TESTS_K"} "tests/oea/$f.py" > "$1/tests-$f.log" 2>&1 &
    pids+=($!)
  done
  for i in "${!pids[@]}"; do
    wait "${pids[$i]}"
    codes+=($?)
  done
  for i in "${!files[@]}"; do
    f=${files[$i]}
    echo "tests $f: exit ${codes[$i]}; $(tail -n 1 "$1/tests-$f.log")"
    grep -E '^(FAILED|ERROR)' "$1/tests-$f.log" | head -n 20 || true
    [ "${codes[$i]}" -ne 0 ] && rc=${codes[$i]}
  done
  echo "tests: exit $rc in $((SECONDS - t0)) s"
  return $rc
}
