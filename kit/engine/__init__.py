"""kit's embedded engine: a tiny random-weight Mixture-of-Experts decoder served over HTTP on the CPU.

It is the "embedded default" experiment of kit: baseline top-k routing against OEA routing
(Opportunistic Expert Activation, arXiv 2511.02237). Run it with ``python -m kit.engine --port 8000``.

This package is shipped alone (with ``kit/__init__.py``), so it imports nothing else from kit and only
numpy, aiohttp and the standard library. This ``__init__`` imports nothing at all, so that the CLI can pin
the BLAS thread count before numpy is loaded.
"""
