"""Helpers for the transformers tests: paths, the kit_hf package on sys.path, a tiny model made once."""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
IMAGE_DIR = ROOT / "images" / "transformers"
OEA_DIR = ROOT / "images" / "oea"
MANIFEST = ROOT / "experiments" / "transformers-cpu.yaml"
MODEL_DIR = ROOT / "build" / "models" / "transformers-tiny-cpu"  # the shipped CPU manifest's model.path
HF_ENV = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "HF_HUB_DISABLE_UPDATE_CHECK": "1"}

for d in (IMAGE_DIR, OEA_DIR):
    if str(d) not in sys.path:
        sys.path.insert(0, str(d))
