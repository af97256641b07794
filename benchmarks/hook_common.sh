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
# kit_oea that PYTHONPATH names, into OUT/tests.log and OUT/tests.xml (bounded: 300 s); prints a summary and
# returns pytest's exit status.
hook_tests() {
  local t0=$SECONDS rc
  timeout 300 $PY -m pytest -q -p no:cacheprovider -m "gpu or slow or not slow" -rfE --junitxml "$1/tests.xml" \
    tests/oea/test_triton_oea.py tests/oea/test_oea_gpu.py > "$1/tests.log" 2>&1
  rc=$?
  echo "tests: exit $rc in $((SECONDS - t0)) s; $(tail -n 1 "$1/tests.log")"
  grep -E '^(FAILED|ERROR)' "$1/tests.log" | head -n 40 || true
  return $rc
}
