"""Attention diagnostics: entropy, top-1 mass, and mass on the relevant positions of a
synthetic induction / copy task.

For causal attention weights A (B, H, T, T) (rows sum to one over u <= t):

    entropy(t)   = -sum_u A_tu log2 A_tu        bits; log2(t + 1) for uniform attention
    top1(t)      = max_u A_tu                   1 for a one-hot row
    concentration = 1 - entropy / log2(t + 1)   0 uniform, 1 one-hot (length-normalised)

Induction / copy task: a random byte string r of length P followed by itself,
x = [r_0 .. r_{P-1}, r_0 .. r_{P-1}]. A query in the second copy at t = P + j holds r_j; the
*copy* position is j (the same byte earlier) and the *induction* position is j + 1 (the byte
that followed it, i.e. the next byte to predict). The mass on those positions, averaged over
the second-copy queries, is reported per layer (mean over heads and the best head).
"""

from __future__ import annotations

import math

import torch

from ..models.lm import CausalLM


def attention_stats(a: torch.Tensor, skip: int = 1) -> dict[str, float]:
    """Entropy (bits), top-1 mass and concentration of causal maps (B, H, T, T), averaged over
    batch, heads and the queries t >= skip (the first queries have almost no choice)."""
    t = a.shape[-1]
    p = a.clamp_min(1e-12)
    ent = -(a * p.log2()).sum(-1)  # (B, H, T)
    top1 = a.amax(-1)
    denom = torch.log2(torch.arange(1, t + 1, dtype=a.dtype)).clamp_min(1e-12)  # log2(t + 1)
    conc = 1 - ent / denom
    sl = slice(skip, None)
    return {"entropy_bits": ent[..., sl].mean().item(), "top1_mass": top1[..., sl].mean().item(),
            "concentration": conc[..., sl].mean().item()}


def induction_batch(batch: int, prefix: int, seed: int = 0) -> torch.Tensor:
    """(batch, 2 * prefix) tokens: random bytes repeated once."""
    g = torch.Generator().manual_seed(seed)
    r = torch.randint(0, 256, (batch, prefix), generator=g)
    return torch.cat([r, r], dim=1)


def induction_mass(a: torch.Tensor, prefix: int) -> dict[str, torch.Tensor]:
    """Per-head mass (H,) on the induction (j + 1) and copy (j) positions for second-copy
    queries t = P + j, j = 0 .. P-2, of maps (B, H, 2P, 2P)."""
    j = torch.arange(prefix - 1)
    q = prefix + j
    ind = a[:, :, q, j + 1]  # (B, H, P-1)
    cp = a[:, :, q, j]
    return {"induction": ind.mean(dim=(0, 2)), "copy": cp.mean(dim=(0, 2))}


@torch.no_grad()
def diagnose(model: CausalLM, text: torch.Tensor | None = None, prefix: int = 0,
             batch: int = 8, seed: int = 0) -> dict:
    """Per-layer stats on ``text`` windows (B, T) and on the induction task; plus the model's
    BPC on the second copy of the induction task (low when it copies)."""
    was = model.training
    model.eval()
    model.set_record_attention(True)
    out: dict = {"layers": []}
    try:
        layers = [{} for _ in model.blocks]
        if text is not None:
            model(text)
            for i, a in enumerate(model.attention_maps()):
                layers[i].update({f"text_{k}": v for k, v in attention_stats(a).items()})
        prefix = prefix or min(64, model.config.max_seq_len // 2)
        x = induction_batch(batch, prefix, seed)
        logits = model(x)
        lp = torch.log_softmax(logits[:, prefix:-1], -1)  # predicting the second copy
        nll = -lp.gather(-1, x[:, prefix + 1:].unsqueeze(-1)).mean().item()
        out["induction_bpc"] = nll / math.log(2)
        for i, a in enumerate(model.attention_maps()):
            m = induction_mass(a, prefix)
            layers[i].update({
                "induction_mass_mean": m["induction"].mean().item(),
                "induction_mass_best_head": m["induction"].max().item(),
                "copy_mass_mean": m["copy"].mean().item(),
                **{f"induction_{k}": v for k, v in attention_stats(a).items()},
            })
        out["layers"] = layers
        keys = layers[0].keys()
        out["mean"] = {k: sum(layer[k] for layer in layers) / len(layers) for k in keys}
        out["best_induction_mass"] = max(layer["induction_mass_best_head"] for layer in layers)
    finally:
        model.set_record_attention(False)
        model.train(was)
    return out
