#!/usr/bin/env python3
"""The peer for bench_vs_torch.sh: tutti's Mixtral-style MoE trained by a
plain PyTorch eager loop on the CPU.

The same model as tutti's rank_model (embedding; per layer RMSNorm, GQA
attention with rotary embeddings, RMSNorm, a top-k router over the softmax
with renormalised gates, SwiGLU experts with tokens grouped by expert;
final RMSNorm, an untied LM head), the same losses (cross-entropy, the
Switch load-balancing loss, the router z-loss), gradient clipping and
AdamW, float32, one thread; with --autocast the forward runs under
torch.autocast("cpu", dtype=torch.bfloat16), PyTorch's mixed precision
(bf16 matrix products through oneDNN, float32 parameters and optimizer). Batches are random tokens: the time of a step
does not depend on them. Prints one line:

    torch_tokens_per_s=<median over steps after warm-up> step_s=<median>
"""

import argparse
import statistics
import time

import torch
import torch.nn.functional as F


class Layer(torch.nn.Module):
    def __init__(self, d, f, heads, kv_heads, experts):
        super().__init__()
        hd = d // heads
        self.heads, self.kv_heads, self.hd = heads, kv_heads, hd
        self.norm1 = torch.nn.Parameter(torch.ones(d))
        self.norm2 = torch.nn.Parameter(torch.ones(d))
        self.q = torch.nn.Linear(d, heads * hd, bias=False)
        self.k = torch.nn.Linear(d, kv_heads * hd, bias=False)
        self.v = torch.nn.Linear(d, kv_heads * hd, bias=False)
        self.o = torch.nn.Linear(heads * hd, d, bias=False)
        self.gate = torch.nn.Linear(d, experts, bias=False)
        s = 0.02
        self.w1 = torch.nn.Parameter(torch.randn(experts, f, d) * s)
        self.w3 = torch.nn.Parameter(torch.randn(experts, f, d) * s)
        self.w2 = torch.nn.Parameter(torch.randn(experts, d, f) * s)


def rmsnorm(x, w, eps=1e-5):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w


def rope(x, cos, sin):
    half = x.shape[-1] // 2
    x1, x2 = x[..., :half], x[..., half:]
    return x * cos + torch.cat((-x2, x1), dim=-1) * sin


def attention(layer, x, cos, sin, mask):
    b, s, _ = x.shape
    q = layer.q(x).view(b, s, layer.heads, layer.hd).transpose(1, 2)
    k = layer.k(x).view(b, s, layer.kv_heads, layer.hd).transpose(1, 2)
    v = layer.v(x).view(b, s, layer.kv_heads, layer.hd).transpose(1, 2)
    q, k = rope(q, cos, sin), rope(k, cos, sin)
    group = layer.heads // layer.kv_heads
    k = k.repeat_interleave(group, dim=1)
    v = v.repeat_interleave(group, dim=1)
    scores = (q @ k.transpose(-1, -2)) / (layer.hd ** 0.5) + mask
    out = torch.softmax(scores, dim=-1) @ v
    return layer.o(out.transpose(1, 2).reshape(b, s, -1))


def moe(layer, x, top_k, n_experts):
    t = x.reshape(-1, x.shape[-1])
    logits = layer.gate(t)
    probs = torch.softmax(logits, dim=-1)
    gates, chosen = probs.topk(top_k, dim=-1)
    gates = gates / gates.sum(-1, keepdim=True)
    flat = chosen.reshape(-1)
    order = torch.argsort(flat, stable=True)
    rows = order // top_k
    counts = torch.bincount(flat, minlength=n_experts).tolist()
    xs = t[rows]
    outs, start = [], 0
    for e, c in enumerate(counts):
        if c:
            h = xs[start:start + c]
            a = F.silu(h @ layer.w1[e].t()) * (h @ layer.w3[e].t())
            outs.append(a @ layer.w2[e].t())
        start += c
    y = torch.cat(outs) * gates.reshape(-1)[order].unsqueeze(-1)
    out = torch.zeros_like(t).index_add_(0, rows, y.to(t.dtype))
    # Switch loss (fraction routed x mean probability) and router z-loss.
    frac = torch.bincount(flat, minlength=n_experts).float() / flat.numel()
    aux = n_experts * (frac * probs.mean(0)).sum()
    z = torch.logsumexp(logits, dim=-1).pow(2).mean()
    return out.view_as(x), aux, z


def main():
    ap = argparse.ArgumentParser()
    for name, default in [("vocab", 256), ("dim", 256), ("ffn", 512),
                          ("layers", 4), ("heads", 8), ("kv_heads", 4),
                          ("experts", 8), ("top_k", 2), ("seq", 128),
                          ("batch", 16), ("steps", 20), ("warmup", 3)]:
        ap.add_argument("--" + name.replace("_", "-"), type=int,
                        default=default)
    ap.add_argument("--autocast", action="store_true")
    a = ap.parse_args()
    torch.set_num_threads(1)
    torch.manual_seed(0)

    embed = torch.nn.Embedding(a.vocab, a.dim)
    layers = torch.nn.ModuleList(
        Layer(a.dim, a.ffn, a.heads, a.kv_heads, a.experts)
        for _ in range(a.layers))
    norm = torch.nn.Parameter(torch.ones(a.dim))
    head = torch.nn.Linear(a.dim, a.vocab, bias=False)
    params = [*embed.parameters(), *layers.parameters(), norm,
              *head.parameters()]
    opt = torch.optim.AdamW(params, lr=1e-3, weight_decay=0.01)

    hd = a.dim // a.heads
    inv = 10000.0 ** (-torch.arange(0, hd, 2).float() / hd)
    ang = torch.arange(a.seq).float()[:, None] * inv[None, :]
    ang = torch.cat((ang, ang), dim=-1)
    cos, sin = ang.cos(), ang.sin()
    mask = torch.full((a.seq, a.seq), float("-inf")).triu(1)

    times = []
    for step in range(a.warmup + a.steps):
        tokens = torch.randint(0, a.vocab, (a.batch, a.seq + 1))
        start = time.perf_counter()
        with torch.autocast("cpu", dtype=torch.bfloat16,
                            enabled=a.autocast):
            x = embed(tokens[:, :-1])
            aux_sum = z_sum = 0.0
            for layer in layers:
                x = x + attention(layer, rmsnorm(x, layer.norm1), cos, sin,
                                  mask)
                y, aux, z = moe(layer, rmsnorm(x, layer.norm2), a.top_k,
                                a.experts)
                x = x + y
                aux_sum, z_sum = aux_sum + aux, z_sum + z
            logits = head(rmsnorm(x, norm))
            loss = F.cross_entropy(logits.reshape(-1, a.vocab).float(),
                                   tokens[:, 1:].reshape(-1))
        (loss + 0.01 * aux_sum + 0.001 * z_sum).backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        if step >= a.warmup:
            times.append(time.perf_counter() - start)
    step_s = statistics.median(times)
    print(f"torch_tokens_per_s={a.batch * a.seq / step_s:.1f} "
          f"step_s={step_s:.4f}")


if __name__ == "__main__":
    main()
