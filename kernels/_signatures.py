"""The argument types each kernel is called with, declared where it is defined.

A kernel is compiled lazily on its first call (``cache=True`` then keeps it on
disk).  :func:`pld.warm` compiles every kernel ahead of time with the types
declared here; it finds the kernels by walking this package, so a new kernel
needs only its ``@called_with(...)`` line.  The declaration must equal what the
engine passes (tests/test_jit_warm.py checks it against a real query): a
different one would compile a specialisation nobody uses.

Declaring the types in ``@njit(sig)`` instead would compile (or load) every
kernel when its module is imported, and ``import pld`` must not do that.
"""

from __future__ import annotations

from numba import types as nt

#: contiguous 1-d arrays and scalars, the only argument types the kernels take
F64 = nt.float64[::1]
I64 = nt.int64[::1]
C128 = nt.complex128[::1]
f64 = nt.float64
i64 = nt.int64

#: attribute of a numba dispatcher holding its declared argument types
ATTRIBUTE = "pld_signature"


def called_with(*types):
    """Record ``types`` (one per argument) on the numba dispatcher below."""
    def mark(dispatcher):
        setattr(dispatcher, ATTRIBUTE, tuple(types))
        return dispatcher
    return mark
