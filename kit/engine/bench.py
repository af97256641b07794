"""``python -m kit.engine.bench``: decode step time vs batch size, plain top-k against OEA, in-process.

Both arms share one set of weights and run interleaved step by step, so background load on the machine
hits them alike. For every batch size it prefills random prompts, warms up, then times decode steps
and reports the median step time and the mean number of distinct experts per layer per step.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
import time

from kit.engine.config import ModelConfig

DEFAULT_BATCHES = "1,4,16,64"


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m kit.engine.bench", description=__doc__)
    p.add_argument("--batches", default=DEFAULT_BATCHES, help=f"comma-separated (default {DEFAULT_BATCHES})")
    p.add_argument("--steps", type=int, default=40, help="timed decode steps per arm and batch size")
    p.add_argument("--oea-k0", type=int, default=4)
    p.add_argument("--prompt-tokens", type=int, default=32)
    p.add_argument("--threads", type=int, default=1,
                   help="BLAS threads (default 1; applies when run from the command line)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--experts", type=int, default=None)
    p.add_argument("--expert-ffn", type=int, default=None)
    p.add_argument("--layers", type=int, default=None)
    p.add_argument("--router-skew", type=float, default=None)
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if "numpy" not in sys.modules:  # the thread count only takes effect before numpy is loaded
        for var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS", "BLIS_NUM_THREADS"):
            os.environ[var] = str(args.threads)

    import numpy as np

    from kit.engine.model import MoEModel

    sizes = {name: getattr(args, name) for name in ("experts", "expert_ffn", "layers", "router_skew")}
    base = MoEModel(ModelConfig(seed=args.seed, **{k: v for k, v in sizes.items() if v is not None}))
    oea = MoEModel.__new__(MoEModel)  # same weights, OEA routing
    oea.__dict__.update(base.__dict__)
    oea.cfg = dataclasses.replace(base.cfg, oea_k0=args.oea_k0)
    rng = np.random.default_rng(args.seed)
    print(f"{base.cfg}\nBLAS threads: {args.threads}; median decode step, mean distinct experts per layer")
    header = ("batch", "top-k ms", "OEA ms", "faster", "top-k experts", "OEA experts")
    print("  ".join(f"{h:>{w}}" for h, w in zip(header, (5, 9, 9, 6, 13, 11), strict=True)))
    for batch in [int(b) for b in args.batches.split(",")]:
        prompts = [rng.integers(0, base.cfg.vocab, args.prompt_tokens).tolist() for _ in range(batch)]
        arms = {"base": base, "oea": oea}
        live = {}
        for name, model in arms.items():
            res = model.prefill(prompts)
            live[name] = (res.next_tokens, res.state)
        times: dict[str, list[float]] = {name: [] for name in arms}
        unique: dict[str, list[float]] = {name: [] for name in arms}
        for step in range(args.steps + 5):
            for name, model in arms.items():
                tokens, state = live[name]
                t0 = time.perf_counter()
                res = model.decode(tokens, state)
                if step >= 5:  # warm-up
                    times[name].append(time.perf_counter() - t0)
                    unique[name].append(float(np.mean(res.unique_experts)))
                live[name] = (res.next_tokens, res.state)
        b_ms, o_ms = (1e3 * float(np.median(times[n])) for n in ("base", "oea"))
        print(f"{batch:>5}  {b_ms:>9.1f}  {o_ms:>9.1f}  {100 * (1 - o_ms / b_ms):>5.0f}%  "
              f"{np.mean(unique['base']):>13.1f}  {np.mean(unique['oea']):>11.1f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
