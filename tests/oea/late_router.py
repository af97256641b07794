"""A router whose ids land late, for the GPU tests (imported only where there is a GPU: importing triton
before tests/oea/test_triton_oea.py sets TRITON_INTERPRET would make that file skip itself on the CPU).

``late_copy_`` stands for a router's last kernel launched with PDL that lets its dependents start at once
(``launch_dependents`` first) and writes the routed ids (a copy of ``src``) only after a long spin: a kernel
launched after it with PDL (the prelaunched kernel B, ``KIT_OEA_B_PDL=1``) then runs while the ids still hold
what was there before, and must wait (``griddepcontrol.wait``) before it reads them. (sglang's GLM-5 routers
release their dependents only after their stores; this one is the worst case PDL allows.)
"""

from __future__ import annotations

from typing import Any

import triton
import triton.language as tl
from triton.language.extra.cuda import gdc_launch_dependents, gdc_wait


@triton.jit
def _late_copy(src_ptr, dst_ptr, n, spins, BLOCK: tl.constexpr):  # noqa: N803 (Triton constexpr)
    gdc_wait()
    gdc_launch_dependents()  # dependents may start now, long before the ids below are written
    acc = tl.program_id(0).to(tl.float32)
    for _ in range(spins):  # a dependent chain the compiler cannot drop (spins is a runtime value)
        acc = acc * 0.999 + 1.0
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    v = tl.load(src_ptr + offs, mask=mask)
    v = tl.where(acc < -1.0, -v, v)  # never true (acc stays in [0, 1000]): the store waits for the spin
    tl.store(dst_ptr + offs, v, mask=mask)


def late_copy_(src: Any, dst: Any, spins: int = 20000) -> None:
    """``dst.copy_(src)`` (same shape, contiguous), late, launched with PDL on the current stream."""
    n, block = src.numel(), 1024
    _late_copy[(triton.cdiv(n, block),)](src, dst, n, spins, BLOCK=block, launch_pdl=True)
