#!/usr/bin/python3
# PyTorch twin of loom's training step (GPT-2, tied embeddings, clipped AdamW) for speed comparison.
"""Times the same model, batch and optimizer as loom in PyTorch on the CPU.

Run with Debian's interpreter (/usr/bin/python3, python3-torch): scripts/bench_cpu.sh calls it.
Prints one line: `torch threads=N ... tokens_per_s=X` (median over the timed steps).
"""
import argparse
import math
import statistics
import sys
import time

try:
    import torch
    import torch.nn as nn
    import torch.nn.functional as F
except ImportError:
    sys.exit("bench_vs_torch: PyTorch is missing: LOOM_SETUP_TORCH=1 scripts/setup.sh "
             "(Debian python3-torch), and run with /usr/bin/python3")


class Block(nn.Module):
    """Pre-LN GPT-2 block: attention (causal, fused qkv) and a GELU(tanh) MLP."""

    def __init__(self, C, H):
        super().__init__()
        self.H = H
        self.ln_1 = nn.LayerNorm(C, eps=1e-5)
        self.c_attn = nn.Linear(C, 3 * C)
        self.c_proj = nn.Linear(C, C)
        self.ln_2 = nn.LayerNorm(C, eps=1e-5)
        self.c_fc = nn.Linear(C, 4 * C)
        self.mlp_proj = nn.Linear(4 * C, C)

    def forward(self, x, mask):
        B, T, C = x.shape
        q, k, v = self.c_attn(self.ln_1(x)).split(C, dim=2)            # (B, T, C) each
        hs = C // self.H
        q = q.view(B, T, self.H, hs).transpose(1, 2)                     # (B, H, T, hs)
        k = k.view(B, T, self.H, hs).transpose(1, 2)
        v = v.view(B, T, self.H, hs).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(hs))          # (B, H, T, T)
        att = F.softmax(att.masked_fill(mask[:T, :T], float("-inf")), dim=-1)
        y = (att @ v).transpose(1, 2).contiguous().view(B, T, C)         # (B, T, C)
        x = x + self.c_proj(y)
        return x + self.mlp_proj(F.gelu(self.c_fc(self.ln_2(x)), approximate="tanh"))


class GPT(nn.Module):
    def __init__(self, L, H, C, V, T):
        super().__init__()
        self.wte = nn.Embedding(V, C)
        self.wpe = nn.Embedding(T, C)
        self.h = nn.ModuleList([Block(C, H) for _ in range(L)])
        self.ln_f = nn.LayerNorm(C, eps=1e-5)
        self.register_buffer("mask", torch.triu(torch.ones(T, T, dtype=torch.bool), 1))
        for p in self.parameters():
            if p.dim() >= 2:
                nn.init.normal_(p, 0.0, 0.02)

    def forward(self, idx, targets):
        B, T = idx.shape
        x = self.wte(idx) + self.wpe(torch.arange(T))                    # (B, T, C)
        for blk in self.h:
            x = blk(x, self.mask)
        logits = self.ln_f(x) @ self.wte.weight.t()                      # (B, T, V) tied head
        return F.cross_entropy(logits.view(B * T, -1), targets.reshape(-1))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n-layer", type=int, default=4)
    ap.add_argument("--n-head", type=int, default=4)
    ap.add_argument("--d-model", type=int, default=256)
    ap.add_argument("--vocab", type=int, default=50257)
    ap.add_argument("--seq-len", type=int, default=64)
    ap.add_argument("--batch", type=int, default=4, help="sequences per step")
    ap.add_argument("--threads", type=int, default=0, help="0: torch's default")
    ap.add_argument("--steps", type=int, default=10, help="timed steps")
    ap.add_argument("--warmup", type=int, default=2, help="untimed steps first")
    ap.add_argument("--seed", type=int, default=1234)
    a = ap.parse_args()
    if a.threads > 0:
        torch.set_num_threads(a.threads)
        torch.set_num_interop_threads(1)
    torch.set_flush_denormal(True)  # as loom (FTZ/DAZ)
    torch.manual_seed(a.seed)
    model = GPT(a.n_layer, a.n_head, a.d_model, a.vocab, a.seq_len)
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=6e-4, betas=(0.9, 0.95), eps=1e-8)
    g = torch.Generator().manual_seed(a.seed)
    times = []
    for step in range(a.warmup + a.steps):
        data = torch.randint(0, a.vocab, (a.batch, a.seq_len + 1), generator=g)
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        loss = model(data[:, :-1], data[:, 1:])
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        dt = time.perf_counter() - t0
        if step >= a.warmup:
            times.append(dt)
    med = statistics.median(times)
    tokens = a.batch * a.seq_len
    print(f"torch version={torch.__version__} threads={torch.get_num_threads()} "
          f"model=L{a.n_layer}H{a.n_head}C{a.d_model}V{a.vocab}T{a.seq_len}B{a.batch} "
          f"steps={len(times)} median_step_ms={med * 1e3:.1f} tokens_per_s={tokens / med:.1f} "
          f"loss={loss.item():.4f}")


if __name__ == "__main__":
    main()
