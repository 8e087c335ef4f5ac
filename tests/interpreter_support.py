"""When Triton's interpreter can run here: a skip marker for tests that need it on any machine.

triton 3.6's interpreter fails on tensor-valued loop bounds under NumPy >= 2.4 ("only
0-dimensional arrays can be converted to Python scalars"; seen with NumPy 2.4.6 here and
2.5.2 on the H200 device image, 2026-11-21). The nox sessions pin numpy<2.4; GPU images
that ship a newer NumPy skip the interpreter-only tests with this reason.
"""

from __future__ import annotations

import numpy as np
import pytest

NUMPY_BREAKS_INTERPRETER = tuple(int(x) for x in np.__version__.split(".")[:2]) >= (2, 4)

needs_interpreter = pytest.mark.skipif(
    NUMPY_BREAKS_INTERPRETER,
    reason=f"NumPy {np.__version__}: triton 3.6's interpreter breaks on loop bounds under "
    "NumPy >= 2.4 (the nox sessions pin numpy<2.4)",
)
