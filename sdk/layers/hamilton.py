"""The quaternion multiplication table and the Hamilton product, shared by every layer.

A quaternion q = a + b i + c j + d k is stored as its four real components in the order
[r, i, j, k] (component index 0..3). Feature tensors keep the components in four contiguous
blocks along the feature/channel axis: ``[r-block | i-block | j-block | k-block]``, each block
holding the n quaternion units of one component. A layer with 4n real channels therefore
holds n quaternions.
"""

from __future__ import annotations

import torch

COMPONENTS = ("r", "i", "j", "k")

# BASIS_PRODUCT[a][b] = (c, s) means e_a * e_b = s * e_c for the basis e = (1, i, j, k):
# i^2 = j^2 = k^2 = ijk = -1, ij = k, jk = i, ki = j, ji = -k, kj = -i, ik = -j.
BASIS_PRODUCT: tuple[tuple[tuple[int, int], ...], ...] = (
    ((0, 1), (1, 1), (2, 1), (3, 1)),
    ((1, 1), (0, -1), (3, 1), (2, -1)),
    ((2, 1), (3, -1), (0, -1), (1, 1)),
    ((3, 1), (2, 1), (1, -1), (0, -1)),
)


def _derive_recombination() -> tuple[tuple[tuple[int, int, int], ...], ...]:
    """RECOMBINE[c] lists (a, b, sign): output component c of w (x) x sums sign * w_a * x_b."""
    terms: list[list[tuple[int, int, int]]] = [[] for _ in range(4)]
    for a in range(4):
        for b in range(4):
            c, s = BASIS_PRODUCT[a][b]
            terms[c].append((a, b, s))
    return tuple(tuple(t) for t in terms)


RECOMBINE = _derive_recombination()

# BLOCK[c_out][b] = (a, sign): in the dense 4x4 block matrix of a quaternion weight, the block in
# output row c_out and input column b is sign * W_a. For the usual order this is
#   [[ r, -i, -j, -k],
#    [ i,  r, -k,  j],
#    [ j,  k,  r, -i],
#    [ k, -j,  i,  r]]
BLOCK: tuple[tuple[tuple[int, int], ...], ...] = tuple(
    tuple(next((a, s) for (a, bb, s) in RECOMBINE[c] if bb == b) for b in range(4))
    for c in range(4)
)


def hamilton_product(p: torch.Tensor, q: torch.Tensor, dim: int = -1) -> torch.Tensor:
    """Hamilton product p (x) q of quaternions whose 4 components lie along ``dim``."""
    if p.shape[dim] != 4 or q.shape[dim] != 4:
        raise ValueError(
            f"hamilton_product needs 4 components along dim {dim}, got shapes "
            f"{tuple(p.shape)} and {tuple(q.shape)}; stack (r, i, j, k) along that axis"
        )
    pa = p.unbind(dim)
    qb = q.unbind(dim)
    out = []
    for c in range(4):
        acc = None
        for a, b, s in RECOMBINE[c]:
            term = pa[a] * qb[b]
            if acc is None:
                acc = term if s > 0 else -term
            else:
                acc = acc + term if s > 0 else acc - term
        out.append(acc)
    return torch.stack(out, dim)


def conjugate(q: torch.Tensor, dim: int = -1) -> torch.Tensor:
    """Quaternion conjugate (r, -i, -j, -k) with components along ``dim``."""
    sign = torch.tensor([1.0, -1.0, -1.0, -1.0], dtype=q.dtype, device=q.device)
    shape = [1] * q.ndim
    shape[dim] = 4
    return q * sign.view(shape)


def recombine(
    products: torch.Tensor, in_axis: int, weight_axis: int, out_axis: int
) -> torch.Tensor:
    """Signed sum of the 16 component products into the 4 output components.

    ``products`` holds P[b, a] = x_b * W_a with the input component b on ``in_axis`` and the
    weight component a on ``weight_axis``. Returns the four output components stacked on
    ``out_axis`` of the result (after both component axes are removed). Only adds and
    subtracts: the multiply-adds all happened in the one matmul/conv that made ``products``.
    """
    pb = products.unbind(in_axis)
    wa = weight_axis if weight_axis < in_axis else weight_axis - 1
    grid = [p.unbind(wa) for p in pb]  # grid[b][a]
    outs = []
    for c in range(4):
        acc = None
        for a, b, s in RECOMBINE[c]:
            t = grid[b][a]
            if acc is None:
                acc = t if s > 0 else -t
            else:
                acc = acc + t if s > 0 else acc - t
        outs.append(acc)
    return torch.stack(outs, out_axis)
