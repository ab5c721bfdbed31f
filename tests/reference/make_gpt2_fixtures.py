#!/usr/bin/python3
"""Write loom's golden GPT-2 numerics fixtures from a plain-PyTorch float64 reference.

Run with Debian's interpreter (it has python3-torch, python3-h5py, python3-numpy):

    /usr/bin/python3 tests/reference/make_gpt2_fixtures.py [--out-dir tests/reference/fixtures]

Outputs (see tests/reference/README.md):
  gpt2_tiny_weights.h5  canonical float32 weights (HF GPT-2 state-dict names, no prefix)
  gpt2_tiny_fixture.h5  inputs/targets, step-0 logits/loss/grads, 3 AdamW steps

The model is loom's GPT-2: pre-LN blocks, learned positions, GELU in
tanh form, LayerNorm eps 1e-5, causal attention scaled by 1/sqrt(head_dim), tied input/output
embeddings, Conv1D weights stored [in, out], no dropout. Loss = mean cross-entropy over B*T.
Weights are drawn as float32 (so the weights file is exactly what loom loads) and upcast to
float64; every computation afterwards is float64. The script is deterministic: running it
twice gives byte-identical files (their sha256 is printed).
"""
import argparse
import hashlib
import math
import os
import sys

import h5py
import numpy as np
import torch
import torch.nn.functional as F

# ---- configuration (tiny; vocab deliberately NOT a multiple of 128) -------------------------
CFG = dict(
    n_layer=2,
    n_head=4,
    d_model=32,
    vocab_size=97,
    max_positions=16,  # rows of wpe
    seq_len=8,         # T
    batch=2,           # B
    steps=3,
)
OPT = dict(
    lr=1e-2,           # constant, no schedule
    beta1=0.9,
    beta2=0.95,
    eps=1e-8,
    weight_decay=0.1,  # only on params with >= 2 dims
    # Fixed literal chosen after inspecting the gradient norms (about 2.15, 1.67, 1.53 with
    # these seeds): clipping is ACTIVE on steps 0 and 1 and inactive on step 2, so both
    # branches are exercised; each norm is >= 4% away from it (asserted below).
    grad_clip=1.6,
)
INIT_SEED = 1337       # torch.manual_seed for the weights
DATA_SEED = 4242       # separate torch.Generator for inputs/targets
LN_EPS = 1e-5
CLIP_EPS = 1e-6        # torch.nn.utils.clip_grad_norm_: coef = clip / (norm + 1e-6)


def param_specs(cfg):
    """(name, shape, kind) in canonical order; kind selects the init distribution."""
    C, L = cfg["d_model"], cfg["n_layer"]
    V, P = cfg["vocab_size"], cfg["max_positions"]
    specs = [("wte.weight", (V, C), "matrix"), ("wpe.weight", (P, C), "matrix")]
    for i in range(L):
        h = "h.%d." % i
        specs += [
            (h + "ln_1.weight", (C,), "ln_weight"),
            (h + "ln_1.bias", (C,), "bias"),
            (h + "attn.c_attn.weight", (C, 3 * C), "matrix"),
            (h + "attn.c_attn.bias", (3 * C,), "bias"),
            (h + "attn.c_proj.weight", (C, C), "residual"),
            (h + "attn.c_proj.bias", (C,), "bias"),
            (h + "ln_2.weight", (C,), "ln_weight"),
            (h + "ln_2.bias", (C,), "bias"),
            (h + "mlp.c_fc.weight", (C, 4 * C), "matrix"),
            (h + "mlp.c_fc.bias", (4 * C,), "bias"),
            (h + "mlp.c_proj.weight", (4 * C, C), "residual"),
            (h + "mlp.c_proj.bias", (C,), "bias"),
        ]
    specs += [("ln_f.weight", (C,), "ln_weight"), ("ln_f.bias", (C,), "bias")]
    return specs


def init_weights_fp32(cfg):
    """Random float32 weights. Biases and LayerNorm params are non-trivial on purpose so
    that every bias path and its gradient is exercised."""
    torch.manual_seed(INIT_SEED)
    std_res = 0.02 / math.sqrt(2 * cfg["n_layer"])
    out = {}
    for name, shape, kind in param_specs(cfg):
        z = torch.randn(shape, dtype=torch.float32)
        if kind == "matrix":
            w = z * 0.02
        elif kind == "residual":
            w = z * std_res
        elif kind == "ln_weight":
            w = 1.0 + z * 0.1
        elif kind == "bias":  # linear biases and LayerNorm biases alike
            w = z * 0.02
        else:
            raise ValueError(kind)
        out[name] = w.to(torch.float32).contiguous()
    return out


def make_batches(cfg):
    g = torch.Generator().manual_seed(DATA_SEED)
    shape = (cfg["steps"], cfg["batch"], cfg["seq_len"])
    V = cfg["vocab_size"]
    inputs = torch.randint(0, V, shape, generator=g, dtype=torch.int64)
    targets = torch.randint(0, V, shape, generator=g, dtype=torch.int64)
    # Make sure the vocab edges are used on step 0 (first and last real row of wte).
    inputs[0, 0, 0] = V - 1
    inputs[0, 1, 3] = 0
    targets[0, 0, 5] = V - 1
    targets[0, 1, 0] = 0
    return inputs, targets


# ---- the model, written out op by op (float64) -------------------------------------------
def layer_norm(x, w, b):
    mean = x.mean(dim=-1, keepdim=True)
    var = ((x - mean) ** 2).mean(dim=-1, keepdim=True)  # biased variance, like torch/HF
    return (x - mean) / torch.sqrt(var + LN_EPS) * w + b


def gelu_tanh(x):
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x ** 3)))


def attention(x, p, h, cfg):
    B, T, C = x.shape
    H = cfg["n_head"]
    hd = C // H
    qkv = x @ p[h + "attn.c_attn.weight"] + p[h + "attn.c_attn.bias"]  # [B,T,3C], q|k|v
    q, k, v = qkv.split(C, dim=-1)
    # head j owns columns [j*hd, (j+1)*hd) of each of q, k, v
    q = q.view(B, T, H, hd).transpose(1, 2)  # [B,H,T,hd]
    k = k.view(B, T, H, hd).transpose(1, 2)
    v = v.view(B, T, H, hd).transpose(1, 2)
    att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(hd))  # [B,H,T,T]
    causal = torch.ones(T, T, dtype=torch.bool).tril()
    att = att.masked_fill(~causal, float("-inf"))
    att = torch.softmax(att, dim=-1)
    y = (att @ v).transpose(1, 2).contiguous().view(B, T, C)
    return y @ p[h + "attn.c_proj.weight"] + p[h + "attn.c_proj.bias"]


def mlp(x, p, h):
    a = x @ p[h + "mlp.c_fc.weight"] + p[h + "mlp.c_fc.bias"]
    return gelu_tanh(a) @ p[h + "mlp.c_proj.weight"] + p[h + "mlp.c_proj.bias"]


def forward(p, idx, cfg):
    """Returns logits [B,T,V] (float64)."""
    B, T = idx.shape
    x = p["wte.weight"][idx] + p["wpe.weight"][:T].unsqueeze(0)
    for i in range(cfg["n_layer"]):
        h = "h.%d." % i
        x = x + attention(layer_norm(x, p[h + "ln_1.weight"], p[h + "ln_1.bias"]), p, h, cfg)
        x = x + mlp(layer_norm(x, p[h + "ln_2.weight"], p[h + "ln_2.bias"]), p, h)
    x = layer_norm(x, p["ln_f.weight"], p["ln_f.bias"])
    return x @ p["wte.weight"].t()  # tied classifier


def loss_fn(logits, targets):
    V = logits.shape[-1]
    return F.cross_entropy(logits.reshape(-1, V), targets.reshape(-1), reduction="mean")


def global_norm(tensors):
    return math.sqrt(sum(float((t.double() ** 2).sum()) for t in tensors))


# ---- self-checks ---------------------------------------------------------------------------
def check_ops():
    g = torch.Generator().manual_seed(7)
    x = torch.randn(3, 5, 32, generator=g, dtype=torch.float64) * 3
    w = torch.randn(32, generator=g, dtype=torch.float64)
    b = torch.randn(32, generator=g, dtype=torch.float64)
    ref = F.layer_norm(x, (32,), w, b, eps=LN_EPS)
    assert torch.allclose(layer_norm(x, w, b), ref, rtol=0, atol=1e-12), "layer_norm"
    ref = F.gelu(x, approximate="tanh")
    assert torch.allclose(gelu_tanh(x), ref, rtol=0, atol=1e-12), "gelu"


def module_forward(p, idx, cfg):
    """Second, independent forward built from torch.nn building blocks (nn.MultiheadAttention
    with in_proj = c_attn^T, F.layer_norm, F.gelu tanh) to guard the q|k|v / head layout."""
    B, T = idx.shape
    C, H = cfg["d_model"], cfg["n_head"]
    x = F.embedding(idx, p["wte.weight"]) + F.embedding(torch.arange(T), p["wpe.weight"])
    mask = torch.triu(torch.ones(T, T, dtype=torch.bool), diagonal=1)  # True = masked
    for i in range(cfg["n_layer"]):
        h = "h.%d." % i
        mha = torch.nn.MultiheadAttention(C, H, dropout=0.0, bias=True, batch_first=True,
                                          dtype=torch.float64)
        with torch.no_grad():
            mha.in_proj_weight.copy_(p[h + "attn.c_attn.weight"].t())
            mha.in_proj_bias.copy_(p[h + "attn.c_attn.bias"])
            mha.out_proj.weight.copy_(p[h + "attn.c_proj.weight"].t())
            mha.out_proj.bias.copy_(p[h + "attn.c_proj.bias"])
        a = F.layer_norm(x, (C,), p[h + "ln_1.weight"], p[h + "ln_1.bias"], eps=LN_EPS)
        x = x + mha(a, a, a, attn_mask=mask, need_weights=False)[0]
        a = F.layer_norm(x, (C,), p[h + "ln_2.weight"], p[h + "ln_2.bias"], eps=LN_EPS)
        a = F.linear(a, p[h + "mlp.c_fc.weight"].t(), p[h + "mlp.c_fc.bias"])
        a = F.gelu(a, approximate="tanh")
        x = x + F.linear(a, p[h + "mlp.c_proj.weight"].t(), p[h + "mlp.c_proj.bias"])
    x = F.layer_norm(x, (C,), p["ln_f.weight"], p["ln_f.bias"], eps=LN_EPS)
    return F.linear(x, p["wte.weight"])


def finite_difference_check(p64, idx, tgt, grads, cfg):
    """Central differences in float64 against autograd for a few scalar entries."""
    probes = [
        ("wte.weight", (cfg["vocab_size"] - 1, 3)),  # tied: lookup + classifier paths
        ("wte.weight", (11, 17)),
        ("h.0.attn.c_attn.weight", (2, 40)),          # a k column
        ("h.1.mlp.c_fc.bias", (77,)),
        ("h.1.ln_1.weight", (5,)),
        ("wpe.weight", (7, 0)),
    ]
    eps = 1e-5  # truncation error ~eps^2, round-off ~1e-16*loss/eps: both ~1e-10
    worst = 0.0
    with torch.no_grad():
        for name, ix in probes:
            t = p64[name]
            old = float(t[ix])
            t[ix] = old + eps
            lp = float(loss_fn(forward(p64, idx, cfg), tgt))
            t[ix] = old - eps
            lm = float(loss_fn(forward(p64, idx, cfg), tgt))
            t[ix] = old
            fd = (lp - lm) / (2 * eps)
            ag = float(grads[name][ix])
            err = abs(fd - ag) / max(abs(ag), 1e-3)  # relative, absolute below 1e-3
            worst = max(worst, err)
            print("  fd check %-24s %-9s autograd % .10e  fd % .10e  err %.1e"
                  % (name, str(ix), ag, fd, err))
            assert err < 1e-6, "finite-difference mismatch for %s%s" % (name, ix)
    return worst


def manual_adamw(params, grads_per_step, cfg):
    """Independent AdamW + clipping (as loom's config documents it) to cross-check torch.optim."""
    lr, b1, b2, eps, wd = (OPT[k] for k in ("lr", "beta1", "beta2", "eps", "weight_decay"))
    p = {k: v.clone() for k, v in params.items()}
    m = {k: torch.zeros_like(v) for k, v in p.items()}
    v2 = {k: torch.zeros_like(v) for k, v in p.items()}
    for s, g in enumerate(grads_per_step(p), start=1):
        norm = global_norm(g.values())
        scale = OPT["grad_clip"] / (norm + CLIP_EPS) if norm > OPT["grad_clip"] else 1.0
        for k in p:
            gk = g[k] * scale
            if p[k].dim() >= 2:
                p[k] -= lr * wd * p[k]
            m[k] = b1 * m[k] + (1 - b1) * gk
            v2[k] = b2 * v2[k] + (1 - b2) * gk * gk
            mhat = m[k] / (1 - b1 ** s)
            vhat = v2[k] / (1 - b2 ** s)
            p[k] -= lr * mhat / (torch.sqrt(vhat) + eps)
    return p


def sha256(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


# ---- HDF5 writing (deterministic: no timestamps, fixed order) ------------------------------
def new_group(parent, name):
    gcpl = h5py.h5p.create(h5py.h5p.GROUP_CREATE)
    gcpl.set_obj_track_times(False)
    gid = h5py.h5g.create(parent.id, name.encode(), gcpl=gcpl)
    return h5py.Group(gid)


def put(group, name, arr):
    group.create_dataset(name, data=np.ascontiguousarray(arr), track_times=False)


def write_files(out_dir, cfg, w32, inputs, targets, logits, loss, grads, grad_norms,
                losses, after3):
    os.makedirs(out_dir, exist_ok=True)
    wpath = os.path.join(out_dir, "gpt2_tiny_weights.h5")
    fpath = os.path.join(out_dir, "gpt2_tiny_fixture.h5")
    names = [n for n, _, _ in param_specs(cfg)]

    with h5py.File(wpath, "w", libver="earliest") as f:
        for n in names:
            put(f, n, w32[n].numpy().astype(np.float32))

    with h5py.File(fpath, "w", libver="earliest") as f:
        for k in ("n_layer", "n_head", "d_model", "vocab_size", "max_positions", "seq_len",
                  "batch", "steps"):
            f.attrs[k] = np.int64(cfg[k])
        for k in ("lr", "beta1", "beta2", "eps", "weight_decay", "grad_clip"):
            f.attrs[k] = np.float64(OPT[k])
        f.attrs["init_seed"] = np.int64(INIT_SEED)
        f.attrs["data_seed"] = np.int64(DATA_SEED)
        # fixed-length ASCII (easy to read with the HDF5 C API)
        f.attrs["generator"] = np.bytes_(
            "tests/reference/make_gpt2_fixtures.py torch %s float64 reference"
            % torch.__version__)
        put(f, "inputs", inputs.numpy().astype(np.int32))
        put(f, "targets", targets.numpy().astype(np.int32))
        put(f, "logits", logits.numpy().astype(np.float64))
        put(f, "loss", np.array([loss], dtype=np.float64))
        put(f, "grad_norm", np.array(grad_norms, dtype=np.float64))
        put(f, "losses", np.array(losses, dtype=np.float64))
        g = new_group(f, "grads")
        for n in names:
            put(g, n, grads[n].numpy().astype(np.float64))
        a = new_group(f, "after3")
        for n in names:
            put(a, n, after3[n].numpy().astype(np.float64))
    return wpath, fpath


def verify_files(wpath, fpath, cfg, w32, grads, after3):
    specs = param_specs(cfg)
    B, T, S, V = cfg["batch"], cfg["seq_len"], cfg["steps"], cfg["vocab_size"]
    with h5py.File(wpath, "r") as f:
        assert sorted(f.keys()) == sorted(n for n, _, _ in specs), "weights: dataset names"
        for n, shape, _ in specs:
            d = f[n]
            assert d.shape == shape and d.dtype == np.float32, (n, d.shape, d.dtype)
            assert np.array_equal(d[()], w32[n].numpy()), n
    with h5py.File(fpath, "r") as f:
        for k in ("n_layer", "n_head", "d_model", "vocab_size", "max_positions", "seq_len",
                  "batch", "steps"):
            assert int(f.attrs[k]) == cfg[k], k
        for k in ("lr", "beta1", "beta2", "eps", "weight_decay", "grad_clip"):
            assert float(f.attrs[k]) == OPT[k], k
        assert f["inputs"].shape == (S, B, T) and f["inputs"].dtype == np.int32
        assert f["targets"].shape == (S, B, T) and f["targets"].dtype == np.int32
        assert int(f["inputs"][()].max()) < V and int(f["targets"][()].min()) >= 0
        assert f["logits"].shape == (B, T, V) and f["logits"].dtype == np.float64
        assert f["loss"].shape == (1,)
        assert f["grad_norm"].shape == (S,) and f["losses"].shape == (S,)
        assert abs(f["losses"][0] - f["loss"][0]) == 0.0
        for grp, ref in (("grads", grads), ("after3", after3)):
            assert sorted(f[grp].keys()) == sorted(n for n, _, _ in specs), grp
            for n, shape, _ in specs:
                d = f[grp][n]
                assert d.shape == shape and d.dtype == np.float64, (grp, n, d.shape)
                assert np.array_equal(d[()], ref[n].numpy()), (grp, n)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    here = os.path.dirname(os.path.abspath(__file__))
    ap.add_argument("--out-dir", default=os.path.join(here, "fixtures"),
                    help="output folder (default tests/reference/fixtures)")
    args = ap.parse_args()

    torch.set_num_threads(1)  # deterministic reduction order
    torch.use_deterministic_algorithms(True)
    cfg = CFG
    assert cfg["vocab_size"] % 128 != 0
    assert cfg["d_model"] % cfg["n_head"] == 0 and cfg["seq_len"] <= cfg["max_positions"]
    check_ops()

    w32 = init_weights_fp32(cfg)
    inputs, targets = make_batches(cfg)
    names = [n for n, _, _ in param_specs(cfg)]

    # float64 leaf parameters from the float32 draws
    params = {n: w32[n].to(torch.float64).clone().requires_grad_(True) for n in names}

    # step-0 logits, loss, gradients under the initial weights
    logits = forward(params, inputs[0], cfg)
    loss = loss_fn(logits, targets[0])
    gl = torch.autograd.grad(loss, [params[n] for n in names])
    grads0 = {n: g.detach().clone() for n, g in zip(names, gl)}
    logits0 = logits.detach().clone()
    loss0 = float(loss)
    print("step-0 loss %.12f (ln V = %.6f)" % (loss0, math.log(cfg["vocab_size"])))

    p_det = {n: t.detach().clone() for n, t in params.items()}
    with torch.no_grad():
        alt = module_forward(p_det, inputs[0], cfg)
    dl = float((alt - logits0).abs().max())
    print("nn.MultiheadAttention forward vs reference: max |dlogits| %.2e" % dl)
    assert dl < 1e-12, "independent forward disagrees"
    print("finite-difference check (float64, central, h=1e-5):")
    worst = finite_difference_check(p_det, inputs[0], targets[0], grads0, cfg)
    print("  worst relative error %.2e" % worst)

    # 3 AdamW steps with torch.optim.AdamW and clip_grad_norm_
    decay = [params[n] for n in names if params[n].dim() >= 2]
    no_decay = [params[n] for n in names if params[n].dim() < 2]
    opt = torch.optim.AdamW(
        [{"params": decay, "weight_decay": OPT["weight_decay"]},
         {"params": no_decay, "weight_decay": 0.0}],
        lr=OPT["lr"], betas=(OPT["beta1"], OPT["beta2"]), eps=OPT["eps"],
        foreach=False, maximize=False, amsgrad=False)
    all_params = [params[n] for n in names]
    grad_norms, losses = [], []
    for s in range(cfg["steps"]):
        opt.zero_grad(set_to_none=True)
        loss = loss_fn(forward(params, inputs[s], cfg), targets[s])
        loss.backward()
        if s == 0:
            for n in names:
                assert torch.equal(params[n].grad, grads0[n]), n
        norm = float(torch.nn.utils.clip_grad_norm_(all_params, max_norm=OPT["grad_clip"]))
        grad_norms.append(norm)
        losses.append(float(loss))
        active = norm > OPT["grad_clip"]
        print("step %d: loss %.12f  grad_norm %.12f  clip %s" % (
            s, losses[-1], norm, "ACTIVE" if active else "inactive"))
        # keep away from the clip threshold so "scale only when norm > clip" and torch's
        # always-multiply-by-min(1, clip/(norm+1e-6)) agree
        assert abs(norm - OPT["grad_clip"]) > 0.02 * OPT["grad_clip"], "norm too close to clip"
        opt.step()
    assert grad_norms[0] > OPT["grad_clip"], "clipping must be active at step 0"
    assert any(n < OPT["grad_clip"] for n in grad_norms), "want one unclipped step too"
    assert abs(grad_norms[0] - global_norm(grads0.values())) < 1e-12
    after3 = {n: params[n].detach().clone() for n in names}

    # cross-check torch.optim.AdamW against an independent implementation of the contract
    def grads_per_step(p):
        for s in range(cfg["steps"]):
            q = {n: t.detach().clone().requires_grad_(True) for n, t in p.items()}
            l = loss_fn(forward(q, inputs[s], cfg), targets[s])
            gs = torch.autograd.grad(l, [q[n] for n in names])
            yield {n: g.detach() for n, g in zip(names, gs)}
    init64 = {n: w32[n].to(torch.float64) for n in names}
    manual = manual_adamw(init64, grads_per_step, cfg)
    diff = max(float((manual[n] - after3[n]).abs().max()) for n in names)
    print("manual AdamW vs torch.optim.AdamW: max abs diff %.2e" % diff)
    assert diff < 1e-12, "AdamW cross-check failed"
    moved = max(float((after3[n] - init64[n]).abs().max()) for n in names)
    print("max |after3 - init| = %.4e" % moved)

    wpath, fpath = write_files(args.out_dir, cfg, w32, inputs, targets, logits0, loss0,
                               grads0, grad_norms, losses, after3)
    verify_files(wpath, fpath, cfg, w32, grads0, after3)
    for pth in (wpath, fpath):
        print("%s  %s  (%d bytes)" % (sha256(pth), os.path.relpath(pth), os.path.getsize(pth)))
    print("ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
