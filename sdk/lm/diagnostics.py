"""Attention diagnostics: entropy, top-1 mass, and mass on the relevant positions of a
synthetic induction / copy task; phase diagnostics (order parameter, circular variance) of the
Kuramoto layers (``phase_stats``).

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


def order_parameter(theta: torch.Tensor, skip: int = 0) -> torch.Tensor:
    """Kuramoto order parameter R = |mean_t exp(i theta_t)| of phases (B, H, T, n) over the
    tokens t >= skip, per oscillator, averaged over batch and oscillators -> (H,). R = 1: the
    window's tokens share the phase; ~1/sqrt(T) for independent uniform phases."""
    th = theta[:, :, skip:]
    r = torch.sqrt(torch.cos(th).mean(2) ** 2 + torch.sin(th).mean(2) ** 2)  # (B, H, n)
    return r.mean(dim=(0, 2))


@torch.no_grad()
def phase_stats(model: CausalLM, text: torch.Tensor) -> dict | None:
    """Phase diagnostics of Kuramoto layers on windows ``text`` (B, T), per layer and head:

    order_parameter[s]  R of theta^s (s = 0 before coupling .. S after the last step): does
                        coupling synchronize the window?
    circular_variance   1 - R of the final phases theta^S
    local_order[s]      mean_t |sum_u A_tu exp(i phi_u)|: coherence of what each token attends
                        to at step s (the resultant length of the mean it moves toward)

    None for models without a Kuramoto layer."""
    if not any(hasattr(blk.mixer, "record_phases") for blk in model.blocks):
        return None
    was = model.training
    model.eval()
    model.set_record_phases(True)
    try:
        model(text)
        layers = []
        for i, blk in enumerate(model.blocks):
            m = blk.mixer
            r = [order_parameter(th) for th in m.last_phases]  # S + 1 of (H,)
            local = [lo[:, :, 1:].mean(dim=(0, 2, 3)) for lo in m.last_local_order]  # (H,)
            layers.append({
                "layer": i,
                "order_parameter": [x.tolist() for x in r],
                "circular_variance": (1 - r[-1]).tolist(),
                "local_order": [x.tolist() for x in local],
                "order_parameter_mean": [x.mean().item() for x in r],
                "circular_variance_mean": (1 - r[-1]).mean().item(),
                "local_order_mean": [x.mean().item() for x in local],
            })
    finally:
        model.set_record_phases(False)
        model.train(was)
    return {"windows": int(text.shape[0]), "ctx": int(text.shape[1]), "layers": layers}


def phase_table(stats: dict, slice_name: str) -> str:
    """A markdown table of ``phase_stats`` (one row per layer and head)."""
    lines = [f"Phase diagnostics on {slice_name} ({stats['windows']} windows of {stats['ctx']} "
             "bytes): order parameter R per coupling step (R0 before coupling), circular "
             "variance 1 - R of the final phases, local order |m_t| per step", "",
             "| layer | head | R per step | circular variance | local order per step |",
             "|---|---|---|---|---|"]
    for layer in stats["layers"]:
        heads = len(layer["circular_variance"])
        for h in range(heads):
            rs = " -> ".join(f"{r[h]:.3f}" for r in layer["order_parameter"])
            lo = " / ".join(f"{x[h]:.3f}" for x in layer["local_order"])
            lines.append(f"| {layer['layer']} | {h} | {rs} | {layer['circular_variance'][h]:.3f}"
                         f" | {lo} |")
    return "\n".join(lines)
