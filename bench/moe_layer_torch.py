#!/usr/bin/env python3
"""The anchor for gpu_bench's MoE-layer row: the same layer in PyTorch.

Router linear, top-k, softmax over the chosen logits, tokens grouped by
expert (stable sort), SwiGLU experts (w1, w3, w2) one matmul each per
expert, gate-weighted combine; forward + backward of everything through
autograd. fp32 with TF32 off, like tutti's fp32 path. Timed with CUDA
events, median of 5 samples of the mean over --iters steps after warm-up,
the same protocol as bench/gpu_bench.cpp. Prints one line:

    torch_moe_ms=<milliseconds>
"""

import argparse
import statistics

import torch
import torch.nn.functional as F


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--tokens", type=int, default=4096)
    ap.add_argument("--dim", type=int, default=1024)
    ap.add_argument("--ffn", type=int, default=2816)
    ap.add_argument("--experts", type=int, default=8)
    ap.add_argument("--topk", type=int, default=2)
    ap.add_argument("--iters", type=int, default=1)
    a = ap.parse_args()

    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    dev = torch.device("cuda")
    gen = torch.Generator(device=dev).manual_seed(7)
    T, d, ffn, E, k = a.tokens, a.dim, a.ffn, a.experts, a.topk

    def param(*shape, scale):
        return (torch.randn(*shape, device=dev, generator=gen) * scale).requires_grad_()

    x = param(T, d, scale=1.0)
    wr = param(E, d, scale=0.03)
    w1 = param(E, ffn, d, scale=0.03)
    w3 = param(E, ffn, d, scale=0.03)
    w2 = param(E, d, ffn, scale=0.02)
    dout = torch.randn(T, d, device=dev, generator=gen)
    token_of_slot = torch.arange(T, device=dev).repeat_interleave(k)

    def layer(x):
        logits = x @ wr.t()
        top, idx = torch.topk(logits, k, dim=-1)
        gate = torch.softmax(top, dim=-1).reshape(-1)
        order = torch.argsort(idx.reshape(-1), stable=True)  # dispatch order
        counts = torch.bincount(idx.reshape(-1), minlength=E).tolist()
        tok = token_of_slot[order]
        xs = x[tok]
        ys, start = [], 0
        for e, c in enumerate(counts):
            xe = xs[start:start + c]
            h = F.silu(xe @ w1[e].t()) * (xe @ w3[e].t())
            ys.append(h @ w2[e].t())
            start += c
        y = torch.cat(ys) * gate[order, None]
        return torch.zeros_like(x).index_add(0, tok, y)

    def step():
        for p in (x, wr, w1, w3, w2):
            p.grad = None
        layer(x).backward(dout)

    for _ in range(3):
        step()
    torch.cuda.synchronize()
    samples = []
    for _ in range(5):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(a.iters):
            step()
        end.record()
        end.synchronize()
        samples.append(start.elapsed_time(end) / a.iters)
    print(f"torch_moe_ms={statistics.median(samples):.3f}")


if __name__ == "__main__":
    main()
