#!/usr/bin/env bash
# The wheels the H200 machine lacks for kit's real-engine runs (benchmarks/h200_session.sh setup installs them):
# kit's own dependencies that its image does not hold, Locust and its gevent stack, and transformers 5.24.0 with
# its serving extras, each pinned to the version this repository's venv runs (requirements.lock for kit's, the
# venv's for transformers'), as CPython 3.12 manylinux x86_64 wheels into .whl/ (ignored by git, carried by the
# device call). The machine has torch, triton, numpy, scipy, psutil, rich, aiohttp, matplotlib, click, pyyaml,
# requests, anyio, httpx, typer, safetensors and nvidia-ml-py of its own (KINDS.md's list): those stay.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
OUT=.whl
mkdir -p "$OUT"
version() {  # the version this venv runs
  "$PY" -c 'import importlib.metadata as m, sys; print(m.version(sys.argv[1]))' "$1"
}
NAMES=(
  pydantic pydantic_core annotated-types typing-inspection typing_extensions
  jsonschema jsonschema-specifications referencing rpds-py
  cryptography cffi pycparser docker websocket-client
  locust gevent geventhttpclient greenlet zope.event zope.interface brotli certifi
  flask flask-cors flask-login itsdangerous blinker werkzeug configargparse pyzmq msgpack
  python-socketio python-engineio simple-websocket wsproto bidict h11
  transformers huggingface-hub tokenizers hf-xet safetensors
  fastapi starlette uvicorn openai jiter sniffio anyio httpx2 httpcore2 truststore idna opentelemetry-api annotated-doc click
)
specs=()
for n in "${NAMES[@]}"; do
  if v=$(version "$n" 2>/dev/null); then specs+=("$n==$v"); else echo "not in this venv, not carried: $n"; fi
done
"$PY" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64 \
  --platform manylinux2014_x86_64 --platform manylinux1_x86_64 --platform manylinux_2_24_x86_64 \
  --platform manylinux_2_5_x86_64 --platform manylinux_2_34_x86_64 --platform manylinux_2_31_x86_64 \
  -d "$OUT" "${specs[@]}"
du -sh "$OUT"
