set -e
cd /work/wt-workload
export PYTHONPATH=$PWD
PY=/work/main/.venv/bin/python
for n in demo demo-text; do
  $PY - "$n" <<'P'
import sys, yaml
n = sys.argv[1]
d = yaml.safe_load(open(f"experiments/{n}.yaml"))
d["design"]["repeats"] = 4
d["load"]["requests_per_level"] = [16, 32, 64, 128]
d["server"]["port"] = 18391 if n == "demo" else 18392
open(f"/tmp/wl/meas/{n}.yaml", "w").write(yaml.safe_dump(d, sort_keys=False))
P
  XDG_CONFIG_HOME=/tmp/wl/meas/cfg XDG_STATE_HOME=/tmp/wl/meas/state DOCKER_HOST=unix:///tmp/wl/meas/no.sock \
    timeout 1200 $PY -m kit run --allow-unsigned /tmp/wl/meas/$n.yaml --out /tmp/wl/meas/out-$n > /tmp/wl/meas/$n.log 2>&1
done
echo finished
