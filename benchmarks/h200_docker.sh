#!/usr/bin/env bash
# kit's docker runtime end to end on the H200 machine (issue 24), which has no Docker, no network and no NVIDIA
# container toolkit: Debian 12's dockerd 20.10 unpacked into a scratch folder, a base image made there from the
# machine's own Python and torch (`docker import`, pinned by its ID), images/transformers built on it by kit, `kit
# run` of experiments/templates/transformers-h200-docker.yaml (filled in) with the GPU passed as device nodes (GPU
# mode `devices`), then kit SIGKILLed mid-cell: the next `kit run` names the leftover container (and the GPU gate its
# PID and memory) and refuses, `kit clean` removes it, the gates pass again. Everything it measures goes to OUT.
#
#   benchmarks/h200_docker.sh prepare        HERE (has network): build/h200-engine/engine.tar.xz (~35 MiB: dockerd,
#                                            docker-proxy, containerd, containerd-shim-runc-v2, runc, tini as
#                                            docker-init and the libraries dockerd needs, from `apt-get download`
#                                            + `dpkg -x`, never into /); SOURCES lists the .debs and sha256s
#   benchmarks/h200_docker.sh OUT SECONDS    ON THE DEVICE: whatever is not done yet, within SECONDS; resumable
#   benchmarks/h200_docker.sh engine-check OUT   the engine and the base image only (no GPU: also here, with
#                                            DOCKERD_FLAGS=--bridge=none H200_DOCKER_DIR=... H200_DOCKER_RUN=...)
#
# The device calls (each at most 10 minutes; carry at most 64 MiB in all, the working tree is ~6 MiB), one warm
# machine for all three (the imported base image's ID, on which the signed manifest is pinned, lives in
# build/h200-docker/data, kept while the machine stays warm):
#   0. here:     bash benchmarks/device_wheels.sh && bash benchmarks/h200_docker.sh prepare
#                (.devkit/ with runner_ed25519 and trust-runner as benchmarks/h200_session.sh describes)
#   1. device:   carry [".whl", ".devkit"]
#                command: bash benchmarks/h200_docker.sh "$OUT" 540
#                -> wheels installed, the 8-layer model made on the GPU, the root filesystem tar of the host's
#                   Python written (build/h200-docker/rootfs.tar); says "engine not carried" and stops there
#   2. device:   carry ["build/h200-engine"]      (.whl/ and .devkit/ stay from call 1: do not name them again)
#                command: bash benchmarks/h200_docker.sh "$OUT" 560
#                -> dockerd up, base imported, the GPU seen in a container, manifest filled/signed, kit run
#                   (SIGTERM at the deadline: kit's clean path, the next call resumes the bundle)
#   3. device:   carry []     (same command) -> kit run finished, the SIGKILL leftover check, kit clean, gates,
#                   the bundle archived and verified; a 4th call of the same command continues if needed
# Every call ends by stopping its dockerd (containers are kit's and are removed by kit or `kit clean`).
#
# Why the manifest is signed on the device: its image.base must be the imported image's ID, known only after the
# import. experiments/templates/transformers-h200-docker.yaml carries the tag BASE_TAG below in its place; this script
# writes a copy with base: sha256:<ID> (build/h200-docker/transformers-h200-docker.yaml), signs it with a manifest
# key made there (build/h200-docker/manifest_ed25519, namespaces="kit-manifest"), and runs it with a trust file
# naming that key and the runner key (--trust). The signed copy, its .sig and the public key come back in OUT.
set -uo pipefail
cd "$(dirname "$0")/.."
export PYTHONUNBUFFERED=1
PY=${PY:-python3}
ENGINE=build/h200-engine          # carried (prepare makes it)
W=${H200_DOCKER_DIR:-build/h200-docker}  # the scratch folder on the device (engine, data root, bundles, logs)
RUNDIR=${H200_DOCKER_RUN:-/tmp/kit-h200-docker}  # socket, exec root, pid file: short (a socket name is <= 107 bytes)
DOCKERD_FLAGS=${DOCKERD_FLAGS:-}  # more dockerd flags for its first try (tests here: --bridge=none beside the host's)
SOCK=$RUNDIR/docker.sock
BASE_TAG=kit-local/h200-python:host
MANIFEST=experiments/templates/transformers-h200-docker.yaml
SIGNED=$W/transformers-h200-docker.yaml
KEY=$W/manifest_ed25519             # made on the device (not in .devkit/: carrying .devkit again would drop it)
TRUST_FILE=$W/trust
DEBS=(docker.io containerd runc tini libdevmapper1.02.1 libsystemd0 libcap2 libgcrypt20 libgpg-error0 liblz4-1
      libzstd1 liblzma5 libselinux1 libudev1 libpcre2-8-0)

prepare() {
  set -e
  local tmp; tmp=$(mktemp -d /tmp/kit-h200-debs.XXXXXX)
  (cd "$tmp" && apt-get download "${DEBS[@]}" >/dev/null)
  mkdir -p "$tmp/x" "$tmp/engine/bin" "$tmp/engine/lib" "$ENGINE"
  for d in "$tmp"/*.deb; do dpkg -x "$d" "$tmp/x"; done
  cp "$tmp/x/usr/sbin/dockerd" "$tmp/x/usr/sbin/docker-proxy" "$tmp/x/usr/bin/containerd" \
     "$tmp/x/usr/bin/containerd-shim-runc-v2" "$tmp/x/usr/sbin/runc" "$tmp/engine/bin/"
  cp "$tmp/x/usr/bin/tini-static" "$tmp/engine/bin/docker-init"
  cp -a "$tmp"/x/usr/lib/x86_64-linux-gnu/*.so* "$tmp/engine/lib/"
  cp -a "$tmp"/x/lib/x86_64-linux-gnu/*.so* "$tmp/engine/lib/" 2>/dev/null || true
  (cd "$tmp" && sha256sum ./*.deb) > "$tmp/engine/SOURCES"
  tar -C "$tmp" -cf - engine | xz -T0 -6 > "$ENGINE/engine.tar.xz.part"
  mv "$ENGINE/engine.tar.xz.part" "$ENGINE/engine.tar.xz"
  cp "$tmp/engine/SOURCES" "$ENGINE/SOURCES"
  rm -rf "$tmp"
  du -sh "$ENGINE"/*
}

# ------------------------------------------------------------------------------------------- the engine

unpack_engine() {  # build/h200-engine/engine.tar.xz -> $W/engine/{bin,lib}
  [ -x "$W/engine/bin/dockerd" ] && return 0
  [ -f "$ENGINE/engine.tar.xz" ] || return 1
  mkdir -p "$W" && tar -C "$W" -xJf "$ENGINE/engine.tar.xz" && echo "engine: $(cat "$W/engine/SOURCES" | wc -l) .debs"
}

engine_up() { DOCKER_HOST=unix://$SOCK $PY -c 'import docker; docker.from_env(timeout=5).ping()' 2>/dev/null; }

start_dockerd() {  # $1: extra flags ("" first; "--bridge=none" if the bridge cannot be made)
  mkdir -p "$RUNDIR" "$W/data"
  local wa; wa=$(cd "$W" && pwd)
  ulimit -l unlimited 2>/dev/null || echo "dockerd: cannot raise RLIMIT_MEMLOCK (memlock ulimit of containers)"
  # shellcheck disable=SC2086
  LD_LIBRARY_PATH="$wa/engine/lib" PATH="$wa/engine/bin:$PATH" setsid \
    "$wa/engine/bin/dockerd" --iptables=false --ip-masq=false $1 --data-root "$wa/data" --exec-root "$RUNDIR/exec" \
      --pidfile "$RUNDIR/dockerd.pid" -H "unix://$SOCK" --storage-driver overlay2 \
      >>"$W/dockerd.log" 2>&1 < /dev/null &
  for _ in $(seq 1 60); do engine_up && return 0; sleep 0.5; done
  return 1
}

stop_dockerd() {
  local pid; pid=$(cat "$RUNDIR/dockerd.pid" 2>/dev/null) || return 0
  kill -TERM "$pid" 2>/dev/null || return 0
  for _ in $(seq 1 60); do kill -0 "$pid" 2>/dev/null || { echo "dockerd $pid stopped"; return 0; }; sleep 0.5; done
  echo "dockerd $pid did not stop in 30 s"
}

engine() {
  unpack_engine || return 1
  export DOCKER_HOST=unix://$SOCK
  engine_up && return 0
  local t0=$SECONDS
  if ! start_dockerd "$DOCKERD_FLAGS"; then
    echo "dockerd (with its bridge) did not come up; last log lines:"; tail -n 15 "$W/dockerd.log"
    stop_dockerd
    echo "retrying with --bridge=none: containers then have no network, so kit's published ports cannot work"
    start_dockerd "--bridge=none" || { tail -n 15 "$W/dockerd.log"; return 1; }
  fi
  echo "dockerd up in $((SECONDS - t0)) s: $($PY -c 'import docker, json; i = docker.from_env().info(); print(json.dumps({k: i.get(k) for k in ("ServerVersion", "Driver", "CgroupVersion", "CgroupDriver", "KernelVersion", "Runtimes", "DefaultRuntime")}))')"
}

# ------------------------------------------------------------------------------------------- the steps

left() { echo $((DEADLINE - SECONDS)); }
gpu_line() { bash benchmarks/h200_session.sh gpu_line; }
gpu_apps() { nvidia-smi --query-compute-apps=pid,used_memory --format=csv,noheader 2>&1 | tr '\n' ';'; }
status_of() { [ -n "$1" ] && $PY -c 'import json,sys; print(json.load(open(sys.argv[1]))["status"])' "$1/run.json" 2>/dev/null; }

base_image() {  # the root filesystem tar (no engine needed), then the import; the ID in $W/base-id
  if [ ! -f "$W/rootfs.tar" ]; then
    echo "rootfs: $(df -h --output=avail "$PWD" | tail -n 1) free; writing $W/rootfs.tar"
    mkdir -p "$W"
    timeout "$(( $(left) - 30 ))" $PY benchmarks/host_python_image.py "$W/rootfs.tar" 2> "$OUT/rootfs.json" \
      || { echo "rootfs tar failed or ran out of time: $(tail -c 600 "$OUT/rootfs.json")"; return 1; }
    $PY -c 'import json,sys; d=json.load(open(sys.argv[1])); print("rootfs:", d["bytes"] >> 20, "MiB in", d["seconds"], "s")' "$OUT/rootfs.json"
  fi
  engine_up || return 1
  if [ ! -s "$W/base-id" ] || ! docker_py "client.images.get('$(cat "$W/base-id" 2>/dev/null)')" >/dev/null 2>&1; then
    timeout "$(( $(left) - 20 ))" $PY benchmarks/host_python_image.py "$W/rootfs.tar" --import "$BASE_TAG" \
      > "$W/base-id" 2> "$OUT/import.json" \
      || { echo "import failed: $(tail -c 600 "$OUT/import.json")"; rm -f "$W/base-id"; return 1; }
    echo "base image $BASE_TAG: $(cat "$W/base-id") ($(tail -c 300 "$OUT/import.json"))"
  fi
}

docker_py() { $PY -c "import docker; client = docker.from_env(); print($1)"; }

gpu_in_container() {  # the GPU through kit's devices mode, before kit runs anything: nvidia-smi and a matmul
  [ -f "$W/gpu-in-container.done" ] && return 0
  $PY - "$(cat "$W/base-id")" > "$OUT/gpu-in-container.txt" 2>&1 <<'EOF'
import sys, docker
from kit.runtime.docker.gpus import devices_args, find_driver
args = devices_args("all")
print("devices:", args.devices); print("mounts:", [(m["Source"], m["Target"]) for m in args.mounts])
print("environment:", args.environment)
script = ("import torch, time; x = torch.randn(8192, 8192, device='cuda', dtype=torch.bfloat16); torch.cuda.synchronize(); "
          "t = time.perf_counter(); [x @ x for _ in range(20)]; torch.cuda.synchronize(); "
          "dt = (time.perf_counter() - t) / 20; print(torch.cuda.get_device_name(0), torch.__version__, "
          "'matmul 8192^3 bf16: %.2f ms, %.0f TFLOP/s' % (dt * 1e3, 2 * 8192**3 / dt / 1e12))")
client = docker.from_env()
smi = [f"{d}/nvidia-smi" for d in find_driver(None).bin_dirs] or ["nvidia-smi"]
for cmd in ([smi[0], "-L"], ["python3", "-c", script]):
    out = client.containers.run(sys.argv[1], cmd, devices=args.devices, mounts=args.mounts,
                                environment=args.environment, remove=True, network_mode="none")
    print("$", " ".join(cmd[:2]), "\n" + out.decode(errors="replace"))
EOF
  local rc=$?
  cat "$OUT/gpu-in-container.txt"
  [ $rc = 0 ] && touch "$W/gpu-in-container.done"
  return $rc
}

signed_manifest() {  # the template with base: <ID>, signed by a manifest key made here
  local id; id=$(cat "$W/base-id")
  [ -f "$KEY" ] || $PY -m kit keygen --output "$KEY" --comment kit-h200-docker-manifest --role manifest >/dev/null
  { cat .devkit/trust-runner; echo "kit-h200-docker-manifest namespaces=\"kit-manifest\" $(cut -d' ' -f1,2 "$KEY.pub")"; } > "$TRUST_FILE"
  if ! grep -q "$id" "$SIGNED" 2>/dev/null; then
    sed "s|base: $BASE_TAG|base: $id|" "$MANIFEST" > "$SIGNED"
    rm -f "$SIGNED.sig"
    $PY -m kit sign --key "$KEY" "$SIGNED"
  fi
  cp "$SIGNED" "$SIGNED.sig" "$KEY.pub" "$OUT/"
  $PY -m kit verify --trust "$TRUST_FILE" "$SIGNED" | head -n 3
  $PY -m kit plan "$SIGNED" > "$OUT/plan.txt" 2>&1
  grep -n "gpus:" "$OUT/plan.txt" | head -n 3
}

kit_run() {  # run (or resume) the signed manifest into $W/results, at most until the deadline less $1 s
  local keep=$1 bundle st
  bundle=$(ls -d "$W"/results/transformers-h200-docker-*/ 2>/dev/null | head -n 1)
  st=$(status_of "$bundle")
  [ "$st" = complete ] && return 0
  [ "$(left)" -gt $((keep + 90)) ] || { echo "kit run: not enough time left ($(left) s)"; return 1; }
  echo "GPU before kit run: $(gpu_line)"
  if [ -n "$bundle" ]; then
    timeout -s TERM -k 60 $(($(left) - keep)) $PY -m kit run --trust "$TRUST_FILE" --key .devkit/runner_ed25519 --resume "$bundle"
  else
    timeout -s TERM -k 60 $(($(left) - keep)) $PY -m kit run --trust "$TRUST_FILE" --key .devkit/runner_ed25519 --out "$W/results" "$SIGNED"
  fi
  echo "kit run exit: $?; GPU after: $(gpu_line)"
  bundle=$(ls -d "$W"/results/transformers-h200-docker-*/ 2>/dev/null | head -n 1)
  [ "$(status_of "$bundle")" = complete ]
}

save_bundle() {
  local bundle; bundle=$(ls -d "$W"/results/transformers-h200-docker-*/ 2>/dev/null | head -n 1)
  [ -n "$bundle" ] || return 0
  $PY -m kit archive -o "$OUT/transformers-h200-docker.tar.gz" "$bundle"
  $PY -m kit verify --trust "$TRUST_FILE" "$OUT/transformers-h200-docker.tar.gz" > "$OUT/verify.txt" 2>&1
  echo "verify exit $?: $(head -n 3 "$OUT/verify.txt")"
  grep -o '"docker_gpu_runtime"[^}]*' "$bundle"/gates.jsonl 2>/dev/null | head -n 2
  $PY -c 'import json,sys,glob
for f in sorted(glob.glob(sys.argv[1] + "/cells/*/server.json")):
    d = json.load(open(f)); print(f.split("/")[-2], d.get("gpu_mode"), json.dumps(d.get("gpus_seen")))' "$bundle"
  local process=benchmarks/results/h200-signs-2026-12-02/transformers-h200-eager.tar.gz
  if [ "$(status_of "$bundle")" = complete ] && [ -f "$process" ]; then  # the same engine under the process runtime
    $PY -m kit compare "$process" "$OUT/transformers-h200-docker.tar.gz" > "$OUT/compare-process-vs-docker.txt" 2>&1
    echo "kit compare (process runtime bundle vs this one) exit $?: $OUT/compare-process-vs-docker.txt"
  fi
}

sigkill_leftover() {  # kit SIGKILLed with its container holding GPU memory; the next run refuses; kit clean
  [ -f "$W/sigkill.done" ] && return 0
  [ "$(left)" -gt 240 ] || { echo "sigkill check: not enough time left ($(left) s)"; return 1; }
  local log=$OUT/sigkill.txt pid t0=$SECONDS
  mkdir -p "$W/killed"
  # its own process group (setsid, then exec: the same pid), so that SIGKILL reaches kit and its load driver
  $PY -c 'import os, sys; os.setsid(); os.execvp(sys.argv[1], sys.argv[1:])' $PY -m kit run --trust "$TRUST_FILE" \
    --key .devkit/runner_ed25519 --out "$W/killed" "$SIGNED" > "$W/killed/kit-run.log" 2>&1 < /dev/null &
  pid=$!
  echo "kit run (pid $pid) started; waiting for its container to hold GPU memory" | tee "$log"
  while [ $((SECONDS - t0)) -lt 180 ]; do
    used=$(nvidia-smi --query-compute-apps=used_memory --format=csv,noheader,nounits 2>/dev/null | awk '{s+=$1} END {print s+0}')
    [ "${used:-0}" -gt 1024 ] && break
    sleep 2
  done
  sleep 3  # mid-cell: the load is running
  echo "GPU apps before SIGKILL: $(gpu_apps); GPU: $(gpu_line)" | tee -a "$log"
  kill -KILL -- "-$pid"  # kit and its load driver (its own session); the container lives on under dockerd
  sleep 2
  docker_py "[(c.name, c.status, c.top()) for c in client.containers.list(filters={'label': 'kit.managed=1'})]" >> "$log" 2>&1
  echo "GPU apps after SIGKILL: $(gpu_apps)" | tee -a "$log"
  echo "--- kit gates (doctor) with the leftover:" >> "$log"
  $PY -m kit gates "$SIGNED" >> "$log" 2>&1; echo "kit gates exit: $?" | tee -a "$log"
  echo "--- the next kit run:" >> "$log"
  timeout 120 $PY -m kit run --trust "$TRUST_FILE" --key .devkit/runner_ed25519 --out "$W/refused" "$SIGNED" >> "$log" 2>&1
  echo "next kit run exit: $? (5: a gate refused)" | tee -a "$log"
  echo "--- kit clean:" >> "$log"
  $PY -m kit clean >> "$log" 2>&1; echo "kit clean exit: $?" | tee -a "$log"
  echo "GPU apps after kit clean: $(gpu_apps); GPU: $(gpu_line)" | tee -a "$log"
  echo "--- kit gates after kit clean:" >> "$log"
  $PY -m kit gates "$SIGNED" >> "$log" 2>&1; local rc=$?
  echo "kit gates after clean exit: $rc" | tee -a "$log"
  tar -czf "$OUT/killed-bundle.tar.gz" -C "$W" killed refused 2>/dev/null
  grep -n "leftover\|container\|MiB\|pid" "$log" | head -n 30
  [ $rc = 0 ] && touch "$W/sigkill.done"
}

main() {
  OUT=$1
  DEADLINE=$((SECONDS + $2))
  mkdir -p "$OUT" "$W"
  exec > >(tee -a "$OUT/h200_docker.log") 2>&1
  echo "h200_docker: $(date -u +%FT%TZ); $(left) s; GPU: $(gpu_line 2>/dev/null)"
  echo "driver table: $(ls /proc/driver/nvidia/gpus 2>&1 | tr '\n' ' '); nodes: $(ls /dev/nvidia* 2>&1 | tr '\n' ' ');" \
       "driver files: $(ls -d /usr/local/nvidia/* /usr/local/nvidia/*/libcuda.so* /usr/local/nvidia/bin/nvidia-smi 2>&1 | tr '\n' ' ')"
  if ! $PY -c 'import kit, kit_hf, kit_oea, locust, docker' 2>/dev/null || [ ! -f build/models/qwen3-30b-a3b-8l/kit-model.json ]; then
    bash benchmarks/h200_session.sh setup || { echo "setup failed"; exit 1; }
  fi
  [ -f "$W/rootfs.tar" ] || base_image  # the tar needs no engine: written in the first call
  if ! engine; then
    echo "engine not carried ($ENGINE/engine.tar.xz missing) or not started: carry build/h200-engine next call"
    exit 0
  fi
  trap 'stop_dockerd' EXIT
  base_image || exit 1
  gpu_in_container || echo "the GPU in a container failed (see gpu-in-container.txt): kit run goes on, its gates say more"
  signed_manifest || exit 1
  kit_run 60 || echo "kit run not complete yet ($(left) s left): the next call resumes it"
  save_bundle
  if [ "$(status_of "$(ls -d "$W"/results/transformers-h200-docker-*/ 2>/dev/null | head -n 1)")" = complete ]; then
    sigkill_leftover
  fi
  cp "$W/dockerd.log" "$OUT/" 2>/dev/null
  echo "done with $(left) s left; sigkill check $([ -f "$W/sigkill.done" ] && echo done || echo 'not done')"
}

engine_check() {  # the engine from the scratch folder and the base image from this machine's Python, no GPU
  OUT=$1; DEADLINE=$((SECONDS + ${2:-600})); mkdir -p "$OUT"
  engine || exit 1
  trap 'stop_dockerd' EXIT
  base_image || exit 1
  docker_py "client.containers.run('$(cat "$W/base-id")', ['python3', '-c', 'import sys, ssl, json, sqlite3; print(sys.version)'], remove=True, network_mode='none').decode()"
  docker_py "client.images.get('$(cat "$W/base-id")').attrs['Config']"
  published "$(cat "$W/base-id")"
}

published() {  # a server in a container on the default network, its port published on 127.0.0.1: what kit needs
  $PY - "$1" <<'EOF'
import socket, sys, time, urllib.request, docker
client = docker.from_env()
with socket.socket() as s:
    s.bind(("127.0.0.1", 0)); port = s.getsockname()[1]
c = client.containers.run(sys.argv[1], ["python3", "-m", "http.server", "8000"], detach=True,
                          ports={"8000/tcp": ("127.0.0.1", port)}, labels={"kit.h200.check": "1"})
err = None
try:
    for _ in range(60):
        try:
            with urllib.request.build_opener(urllib.request.ProxyHandler({})).open(f"http://127.0.0.1:{port}/", timeout=2) as r:
                print(f"published port: 127.0.0.1:{port} -> container 8000 answered {r.status}"); break
        except OSError as e:
            err = e; time.sleep(0.5)
    else:
        print(f"published port: 127.0.0.1:{port} never answered ({err}); container logs: {c.logs()[-500:]!r}")
finally:
    c.remove(force=True)
EOF
}

case "${1:-}" in
  prepare) prepare ;;
  engine-check) shift; engine_check "$@" ;;
  call) shift; OUT=${OUT:?set OUT}; DEADLINE=$((SECONDS + ${LEFT:-600})); "$@" ;;  # one step, for tests
  gpu_line) gpu_line ;;
  *) main "$@" ;;
esac
