#!/usr/bin/env bash
# Issue 10 check: does the shipped demo detect OEA's TPOT effect on a quiet 2-core machine? Runs N copies of
# experiments/demo.yaml at once on one host, each pinned (taskset) to 2 cores of its own, with its own port,
# state and config dirs, and prints the primary verdict per level of each run and a count per level.
# Run on the device machine (16 cores: N=8) after installing kit (`pip install --no-deps .`).
# Run N copies of experiments/demo.yaml at once, each pinned to its own 2 cores (a quiet 2-core "laptop"
# each), with its own port, state and config dirs; then print the primary verdicts at every level.
# usage: bash .devscripts/demo_par.sh N OUTDIR
N=${1:-7}; OUTD=${2:-/tmp/demo_out}; mkdir -p $OUTD
REPO=$PWD
for i in $(seq 1 $N); do
  d=/tmp/demo$i; rm -rf $d; mkdir -p $d/cfg $d/state
  port=$((18080 + 10*i))
  sed "s/port: 18080/port: $port/" experiments/demo.yaml > $d/demo.yaml
  (cd $d && python3 -m kit sign demo.yaml --key $REPO/keys/example_ed25519 >/dev/null)
  c0=$((2*(i-1))); c1=$((c0+1))
  (cd $d && XDG_CONFIG_HOME=$d/cfg XDG_STATE_HOME=$d/state taskset -c $c0,$c1 \
     python3 -m kit run --trust $REPO/allowed_signers --out $d/results demo.yaml > $d/log.txt 2>&1; echo "run $i rc=$?" >> $d/log.txt) &
done
wait
for i in $(seq 1 $N); do tail -1 /tmp/demo$i/log.txt; done
python3 - "$N" "$OUTD" <<'PY'
import json, sys, glob, pathlib, shutil
n, out = int(sys.argv[1]), pathlib.Path(sys.argv[2])
rows = []
for i in range(1, n + 1):
    for s in glob.glob(f"/tmp/demo{i}/results/*/summary.json"):
        doc = json.load(open(s))
        rows.append({"run": i, "summary": doc})
        print(f"--- run {i}: {s}")
        for c in doc["comparisons"]:
            if c["metric"] == doc["analysis"]["primary"]:
                print(f"  c={c['level']:>3} {c['status']:<16} ratio={c['ratio']} ci={c['ratio_ci']} diff={c['diff']} {c['unit']} df={c['df']}")
levels = sorted({c["level"] for r in rows for c in r["summary"]["comparisons"]})
for lv in levels:
    sig = [c["status"] for r in rows for c in r["summary"]["comparisons"] if c["level"] == lv and c["metric"] == r["summary"]["analysis"]["primary"]]
    print(f"level {lv}: significant in {sum(s == 'significant' for s in sig)} of {len(sig)} runs; statuses {sig}")
json.dump(rows, open(out / "demo_summaries.json", "w"))
PY
