"""``python -m kit.engine``: serve the embedded MoE engine over HTTP.

The BLAS thread count must be fixed before numpy is imported, so this module parses and checks the
command line first and imports the numpy-based modules afterwards.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import ssl
import sys
from pathlib import Path

from kit.engine.config import MAX_MIN_STEP_S, ModelConfig  # pure data, no numpy
from kit.engine.ranks import parse_addr  # asyncio only, no numpy

DEFAULT_THREADS = 1


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {value}")
    return value


def _non_negative(text: str) -> int:
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, got {value}")
    return value


def _step_ms(text: str) -> float:
    value = float(text)
    if not 0 <= value <= MAX_MIN_STEP_S * 1000:  # NaN fails too
        raise argparse.ArgumentTypeError(f"must be between 0 and {MAX_MIN_STEP_S * 1000:.0f} ms, got {text}")
    return value


def build_parser() -> argparse.ArgumentParser:
    """The command-line interface."""
    p = argparse.ArgumentParser(
        prog="python -m kit.engine",
        description="Serve a tiny random-weight MoE decoder (numpy, CPU) with an OpenAI-compatible API.",
    )
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=_non_negative, required=True, help="TCP port (0: pick a free one)")
    p.add_argument("--seed", type=_non_negative, default=0, help="seed of the random weights")
    p.add_argument("--experts", type=_positive, default=64, help="experts per MoE layer")
    p.add_argument("--top-k", type=_positive, default=8, help="experts per token")
    p.add_argument("--oea-k0", type=_non_negative, default=0,
                   help="OEA: experts every token keeps before piggybacking (0: plain top-k)")
    p.add_argument("--layers", type=_positive, default=4)
    p.add_argument("--hidden", type=_positive, default=256)
    p.add_argument("--expert-ffn", type=_positive, default=512, help="inner width of each expert")
    p.add_argument("--vocab", type=_positive, default=1024)
    p.add_argument("--router-skew", type=float, default=None,
                   help="std of the fixed per-expert router bias (expert popularity); default: see config")
    p.add_argument("--max-batch", type=_positive, default=256, help="most sequences in a decode step")
    p.add_argument("--min-step-ms", type=_step_ms, default=0.0,
                   help="each decode step lasts at least this long, the rest asleep (an accelerator's step time "
                        "without its CPU; default 0)")
    p.add_argument("--served-name", default="kit-moe", help="model name of the API")
    p.add_argument("--nnodes", type=_positive, default=1, help="ranks of a server that spans nodes (kit.engine.ranks)")
    p.add_argument("--node-rank", type=_non_negative, default=0, help="this rank (0 serves the API)")
    p.add_argument("--dist-init-addr", default=None, help="HOST:PORT of rank 0's rendezvous (with --nnodes > 1)")
    p.add_argument("--expert-distribution-recorder-mode", choices=["per_pass"], default=None,
                   help="sglang's expert-distribution recorder and its endpoints (kit.engine.recorder)")
    p.add_argument("--threads", type=_positive, default=None,
                   help=f"BLAS threads (default {DEFAULT_THREADS}, or OPENBLAS_NUM_THREADS if set)")
    p.add_argument("--tls-cert", default=None, help="serve https with this PEM certificate (chain)")
    p.add_argument("--tls-key", default=None, help="the certificate's private key (PEM; default: in --tls-cert)")
    p.add_argument("--weights-cache", default=None, metavar="DIR",
                   help="keep a draw of the random weights here and read it back at the next start (the same "
                        "bytes, sha256-checked; default $XDG_CACHE_HOME/kit/engine-weights; 'none': always draw)")
    return p


def weights_cache(value: str | None) -> Path | None:
    """--weights-cache: the directory (default ``$XDG_CACHE_HOME/kit/engine-weights``, ``~/.cache`` without it),
    or None for 'none'."""
    if value is not None:
        return None if value == "none" else Path(value)
    xdg = os.environ.get("XDG_CACHE_HOME", "")
    try:  # a relative XDG_CACHE_HOME is ignored, as the XDG spec says
        return Path(xdg if os.path.isabs(xdg) else Path.home() / ".cache") / "kit" / "engine-weights"
    except RuntimeError:  # no home directory to be found: no cache
        return None


def server_tls(cert: str | None, key: str | None) -> ssl.SSLContext | None:
    """An https server context from a PEM certificate (chain) and its key (None without a certificate)."""
    if cert is None:
        return None
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(cert, key)
    return ctx


def set_blas_threads(threads: int | None) -> int:
    """Pin the BLAS thread pools; must run before numpy is imported."""
    if threads is None:
        threads = int(os.environ.get("OPENBLAS_NUM_THREADS", DEFAULT_THREADS))
    for var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS", "BLIS_NUM_THREADS"):
        os.environ[var] = str(threads)
    return threads


def config_from_args(args: argparse.Namespace) -> ModelConfig:
    """The model configuration named by the command line (not yet validated)."""
    extra = {} if args.router_skew is None else {"router_skew": args.router_skew}
    return ModelConfig(seed=args.seed, experts=args.experts, top_k=args.top_k, oea_k0=args.oea_k0,
                       layers=args.layers, hidden=args.hidden, expert_ffn=args.expert_ffn, vocab=args.vocab,
                       **extra)


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    cfg = config_from_args(args)
    try:
        cfg.validate()
        check_ranks(args)
        tls = server_tls(args.tls_cert, args.tls_key)
    except ValueError as exc:
        parser.error(str(exc))
    except (OSError, ssl.SSLError) as exc:
        parser.error(f"--tls-cert/--tls-key: {exc}")
    threads = set_blas_threads(args.threads)

    # numpy (through the server) only now, after the BLAS thread count is pinned
    from kit.engine.server import configure_logging, serve, serve_rank

    configure_logging()
    if args.node_rank > 0:
        return asyncio.run(serve_rank(args.dist_init_addr, args.node_rank, args.nnodes))
    logging.getLogger("kit.engine").info("%d BLAS thread(s); %s", threads, cfg)
    return asyncio.run(serve(cfg, args.host, args.port, args.max_batch, args.served_name, nnodes=args.nnodes,
                             dist_init_addr=args.dist_init_addr, recorder_mode=args.expert_distribution_recorder_mode,
                             tls=tls, weights_cache=weights_cache(args.weights_cache),
                             min_step_s=args.min_step_ms / 1000))


def check_ranks(args: argparse.Namespace) -> None:
    if args.node_rank >= args.nnodes:
        raise ValueError(f"--node-rank {args.node_rank} must be below --nnodes {args.nnodes}")
    if args.nnodes > 1:
        parse_addr(args.dist_init_addr or "")


if __name__ == "__main__":
    sys.exit(main())
