#!/usr/bin/env python3
"""bench_attention_ref.py: causal bf16 attention of PyTorch's fused backends (cuDNN, flash) on a GPU,
forward and backward, at the shapes of scripts/bench_gpu.sh, as the yardstick for loom's own attention
kernels (whose times come from the kernel profile). Needs PyTorch with CUDA; prints a markdown table."""
import argparse
import statistics

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel


def median_ms(fn, reps=20, warmup=3):
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b))
    return statistics.median(times)


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--shapes", default="16,12,1024,64 8,16,1024,64",
                    help="space-separated B,H,T,head_size")
    args = ap.parse_args()
    print("| backend | B H T hd | forward ms | backward ms (fwd+bwd - fwd) | fwd TFLOP/s (causal half) |")
    print("|---|---|--:|--:|--:|")
    for spec in args.shapes.split():
        B, H, T, D = map(int, spec.split(","))
        g = torch.Generator(device="cuda").manual_seed(0)
        q, k, v = (torch.randn(B, H, T, D, device="cuda", dtype=torch.bfloat16, generator=g)
                   .requires_grad_() for _ in range(3))
        do = torch.randn(B, H, T, D, device="cuda", dtype=torch.bfloat16, generator=g)
        for name, backend in (("cudnn", SDPBackend.CUDNN_ATTENTION), ("flash", SDPBackend.FLASH_ATTENTION)):
            try:
                with sdpa_kernel(backend):
                    fwd = median_ms(lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True))

                    def both():
                        o = F.scaled_dot_product_attention(q, k, v, is_causal=True)
                        o.backward(do)
                    full = median_ms(both)
            except RuntimeError as e:
                print(f"| {name} | {B} {H} {T} {D} | unavailable: {str(e).splitlines()[0][:80]} | | |")
                continue
            flops = 4 * B * H * T * T * D / 2
            print(f"| {name} | {B} {H} {T} {D} | {fwd:.3f} | {full - fwd:.3f} | {flops / fwd / 1e9:.0f} |")


if __name__ == "__main__":
    main()
