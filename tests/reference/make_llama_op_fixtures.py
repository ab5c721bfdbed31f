#!/usr/bin/python3
"""Write loom's Llama-op fixtures from a plain-PyTorch float64 reference.

Run with Debian's interpreter (it has python3-torch, python3-h5py, python3-numpy):

    /usr/bin/python3 tests/reference/make_llama_op_fixtures.py [--out-dir tests/reference/fixtures]

Output: llama_ops_fixture.h5 (see tests/reference/README.md), one group per op:
  rmsnorm/   x (N, C), w (C), dout (N, C), eps -> out, rstd (N), dx, dw
  rope/      qkv (B, T, (NH + 2 NKV) D), dout (same), dims, theta -> out, dqkv
  swiglu/    gu (N, 2F) = [gate | up] per row, dout (N, F) -> out, dgu
  gqa/, mqa/ qkv (B, T, (NH + 2 NKV) D), dout (B, T, NH D), dims -> out, dqkv
Shapes come from the datasets; dims = [B, T, NH, NKV, D] where heads matter; eps and theta
are one-element datasets. Inputs are drawn as float32 (stored as
float32, exactly what loom reads), upcast to float64; everything afterwards is float64, and the
gradients come from autograd of L = sum(out * dout). The script is deterministic (a second run
writes a byte-identical file; its sha256 is printed).
"""
import argparse
import hashlib
import math
import os

import h5py
import numpy as np
import torch

SEED = 2024
EPS = 1e-5
THETA = 10000.0


def rmsnorm(x, w):
    # Hugging Face's LlamaRMSNorm in float64: x * rsqrt(mean(x^2) + eps) * w.
    rstd = torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + EPS)
    return x * rstd * w, rstd.squeeze(-1)


def rotate_half(x):
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def rope(qkv, nh, nkv, d):
    # q and k heads rotated with Hugging Face's rotate_half pairing; v passes through.
    B, T, _ = qkv.shape
    inv_freq = THETA ** (-torch.arange(0, d, 2, dtype=torch.float64) / d)  # (D/2)
    ang = torch.arange(T, dtype=torch.float64)[:, None] * inv_freq[None, :]  # (T, D/2)
    emb = torch.cat((ang, ang), dim=-1)  # (T, D)
    cos, sin = emb.cos()[None, :, None, :], emb.sin()[None, :, None, :]
    qk = qkv[..., : (nh + nkv) * d].reshape(B, T, nh + nkv, d)
    rot = qk * cos + rotate_half(qk) * sin
    return torch.cat((rot.reshape(B, T, -1), qkv[..., (nh + nkv) * d:]), dim=-1)


def swiglu(gu):
    f = gu.shape[-1] // 2
    gate, up = gu[..., :f], gu[..., f:]
    return torch.nn.functional.silu(gate) * up


def gqa_attention(qkv, nh, nkv, d):
    # Causal attention; query head h reads kv head h // (nh // nkv) (Hugging Face's repeat_kv).
    B, T, _ = qkv.shape
    q = qkv[..., : nh * d].reshape(B, T, nh, d).transpose(1, 2)  # (B, NH, T, D)
    k = qkv[..., nh * d: (nh + nkv) * d].reshape(B, T, nkv, d).transpose(1, 2)
    v = qkv[..., (nh + nkv) * d:].reshape(B, T, nkv, d).transpose(1, 2)
    k = k.repeat_interleave(nh // nkv, dim=1)  # (B, NH, T, D)
    v = v.repeat_interleave(nh // nkv, dim=1)
    s = q @ k.transpose(-1, -2) / math.sqrt(d)
    mask = torch.ones(T, T, dtype=torch.bool).triu(1)
    p = torch.softmax(s.masked_fill(mask, float("-inf")), dim=-1)
    return (p @ v).transpose(1, 2).reshape(B, T, nh * d)


def self_check():
    # rotate_half == the complex rotation of the pairs (x_i, x_{i+D/2}) by t * theta^(-2i/D);
    # repeat_interleave's kv head for query head h is h // (nh // nkv).
    g = torch.Generator().manual_seed(7)
    x = torch.rand(1, 3, 7 * 4, generator=g, dtype=torch.float64)
    y = rope(x, 3, 2, 4)
    for t in range(3):
        for h in range(5):
            for i in range(2):
                a = t * THETA ** (-2.0 * i / 4)
                z = complex(x[0, t, h * 4 + i], x[0, t, h * 4 + i + 2]) * complex(math.cos(a), math.sin(a))
                assert abs(y[0, t, h * 4 + i] - z.real) < 1e-12
                assert abs(y[0, t, h * 4 + i + 2] - z.imag) < 1e-12
    assert torch.equal(y[..., 20:], x[..., 20:])
    k = torch.arange(2.0).reshape(1, 2, 1, 1).repeat_interleave(3, dim=1).flatten()
    assert k.tolist() == [h // 3 for h in range(6)]


def draw(gen, *shape, lo=-1.0, hi=1.0):
    x = torch.rand(*shape, generator=gen, dtype=torch.float32) * (hi - lo) + lo
    return x


def grads(fn, inputs, dout):
    xs = [x.double().requires_grad_(True) for x in inputs]
    outs = fn(*xs)
    out = outs[0] if isinstance(outs, tuple) else outs
    (out * dout.double()).sum().backward()
    return outs, [x.grad for x in xs]


def put(group, name, arr):
    group.create_dataset(name, data=np.ascontiguousarray(arr), track_times=False)


def new_group(parent, name):
    gcpl = h5py.h5p.create(h5py.h5p.GROUP_CREATE)
    gcpl.set_obj_track_times(False)
    return h5py.Group(h5py.h5g.create(parent.id, name.encode(), gcpl=gcpl))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out-dir", default=os.path.join(os.path.dirname(__file__), "fixtures"))
    args = ap.parse_args()
    self_check()
    gen = torch.Generator().manual_seed(SEED)
    path = os.path.join(args.out_dir, "llama_ops_fixture.h5")
    os.makedirs(args.out_dir, exist_ok=True)
    with h5py.File(path, "w", libver="earliest") as f:
        # RMSNorm: rows with a non-zero mean (no mean subtraction: it must stay in the scale).
        N, C = 6, 20
        x, w, g = draw(gen, N, C, lo=-2.0, hi=3.0), draw(gen, C, lo=0.5, hi=1.5), draw(gen, N, C)
        (out, rstd), (dx, dw) = grads(rmsnorm, [x, w], g)
        grp = new_group(f, "rmsnorm")
        put(grp, "eps", np.array([EPS], dtype=np.float64))
        for k, v in (("x", x), ("w", w), ("dout", g)):
            put(grp, k, v.numpy())
        for k, v in (("out", out), ("rstd", rstd), ("dx", dx), ("dw", dw)):
            put(grp, k, v.detach().numpy())

        # RoPE on a grouped layout (NH = 4 query heads, NKV = 2 kv heads, D = 8).
        B, T, NH, NKV, D = 2, 5, 4, 2, 8
        x, g = draw(gen, B, T, (NH + 2 * NKV) * D), draw(gen, B, T, (NH + 2 * NKV) * D)
        out, (dx,) = grads(lambda a: rope(a, NH, NKV, D), [x], g)
        grp = new_group(f, "rope")
        put(grp, "dims", np.array([B, T, NH, NKV, D], dtype=np.int64))
        put(grp, "theta", np.array([THETA], dtype=np.float64))
        put(grp, "qkv", x.numpy())
        put(grp, "dout", g.numpy())
        put(grp, "out", out.detach().numpy())
        put(grp, "dqkv", dx.numpy())

        # SwiGLU: gates over [-6, 6] (both tails of silu).
        N, F = 5, 9
        x, g = draw(gen, N, 2 * F, lo=-6.0, hi=6.0), draw(gen, N, F)
        out, (dx,) = grads(swiglu, [x], g)
        grp = new_group(f, "swiglu")
        put(grp, "gu", x.numpy())
        put(grp, "dout", g.numpy())
        put(grp, "out", out.detach().numpy())
        put(grp, "dgu", dx.numpy())

        # Grouped-query (NH = 4, NKV = 2) and multi-query (NH = 3, NKV = 1) attention.
        for name, (B, T, NH, NKV, D) in (("gqa", (2, 7, 4, 2, 8)), ("mqa", (1, 6, 3, 1, 4))):
            x = draw(gen, B, T, (NH + 2 * NKV) * D, lo=-1.5, hi=1.5)
            g = draw(gen, B, T, NH * D)
            out, (dx,) = grads(lambda a: gqa_attention(a, NH, NKV, D), [x], g)
            grp = new_group(f, name)
            put(grp, "dims", np.array([B, T, NH, NKV, D], dtype=np.int64))
            put(grp, "qkv", x.numpy())
            put(grp, "dout", g.numpy())
            put(grp, "out", out.detach().numpy())
            put(grp, "dqkv", dx.numpy())
    with open(path, "rb") as fh:
        digest = hashlib.sha256(fh.read()).hexdigest()
    print(f"{digest}  {os.path.basename(path)}  ({os.path.getsize(path):,} bytes)")


if __name__ == "__main__":
    main()
