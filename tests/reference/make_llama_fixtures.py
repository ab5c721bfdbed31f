#!/usr/bin/python3
"""Write loom's golden Llama numerics fixtures from a plain-PyTorch float64 reference.

Run with Debian's interpreter (it has python3-torch, python3-h5py, python3-numpy):

    /usr/bin/python3 tests/reference/make_llama_fixtures.py [--out-dir tests/reference/fixtures]

Outputs (see tests/reference/README.md):
  llama_tiny_weights.h5  canonical float32 weights (loom names, [in, out])
  llama_tiny_fixture.h5  inputs/targets, step-0 logits/loss/grads, 3 clipped AdamW steps
  llama_tiny_hf/         the same weights as a Hugging Face LlamaForCausalLM checkpoint:
                         config.json, two safetensors shards and their index

The model (llama_reference.py) is loom's Llama: RMSNorm, RoPE with rotate_half pairing,
grouped-query causal attention, SwiGLU MLP, no biases, untied classifier. Weights are drawn as
float32 (so the weights files are exactly what loom loads) and upcast to float64; everything
afterwards is float64. The script is deterministic: a second run writes byte-identical files
(their sha256 is printed).
"""
import argparse
import hashlib
import json
import math
import os
import sys

import h5py
import numpy as np
import torch
import torch.nn.functional as F

import llama_reference as ref
from make_safetensors_fixture import read_safetensors, write_safetensors

CFG = dict(
    n_layer=2,
    n_head=4,
    n_kv_head=2,       # grouped-query: 2 query heads per kv head
    d_model=32,        # head_dim 8
    ffn_hidden=40,     # c_fc has 2F = 80 columns: gate | up, each splits over tp 2 as 20
    vocab_size=97,     # not a multiple of 128: loom's vocab padding is exercised
    max_positions=16,  # only a bound on seq_len (no position table); HF max_position_embeddings
    seq_len=8,
    batch=2,
    steps=3,
    # theta 100 instead of Llama's 1e4: with D = 8 and T = 8 the four frequencies are
    # 1, 0.32, 0.1, 0.03 rad per position, so every pair turns visibly (1e4 would leave the
    # last pair at 0.007 rad at t = 7) and a theta that is not the default must be read.
    rope_theta=100.0,
    norm_eps=1e-5,
)
OPT = dict(
    lr=1e-2,           # constant, no schedule
    beta1=0.9,
    beta2=0.95,
    eps=1e-8,
    weight_decay=0.1,  # only on params with >= 2 dims
    # Fixed literal chosen after inspecting the gradient norms (about 2.31, 2.24, 2.07 with
    # these seeds): clipping is ACTIVE on steps 0 and 1 and inactive on step 2; each norm is
    # >= 3.5% away from it (> 2% asserted below), so fp32 rounding cannot flip the branch.
    grad_clip=2.15,
)
INIT_SEED = 1337
DATA_SEED = 4247  # 4242 (the GPT-2 fixture's) gives norms no threshold separates by 2%
CLIP_EPS = 1e-6  # torch.nn.utils.clip_grad_norm_: coef = clip / (norm + 1e-6)
SHARD1 = "model-00001-of-00002.safetensors"
SHARD2 = "model-00002-of-00002.safetensors"


def init_weights_fp32(cfg):
    """Matrices and embeddings N(0, 0.02); RMSNorm gains 1 + N(0, 0.1), so their paths and
    gradients are exercised. One torch.randn float32 draw per parameter in canonical order."""
    torch.manual_seed(INIT_SEED)
    out = {}
    for name, shape, kind in ref.param_specs(cfg):
        z = torch.randn(shape, dtype=torch.float32)
        out[name] = (z * 0.02 if kind == "matrix" else 1.0 + z * 0.1).contiguous()
    return out


def make_batches(cfg):
    g = torch.Generator().manual_seed(DATA_SEED)
    shape = (cfg["steps"], cfg["batch"], cfg["seq_len"])
    V = cfg["vocab_size"]
    inputs = torch.randint(0, V, shape, generator=g, dtype=torch.int64)
    targets = torch.randint(0, V, shape, generator=g, dtype=torch.int64)
    # The vocab edges on step 0: first and last rows of wte (inputs) and lm_head (targets).
    inputs[0, 0, 0] = V - 1
    inputs[0, 1, 3] = 0
    targets[0, 0, 5] = V - 1
    targets[0, 1, 0] = 0
    return inputs, targets


def global_norm(tensors):
    return math.sqrt(sum(float((t.double() ** 2).sum()) for t in tensors))


def grads_of(p, idx, tgt, cfg, names, mutate=None):
    q = {n: t.detach().clone().requires_grad_(True) for n, t in p.items()}
    logits = ref.forward(q, idx, cfg, mutate)
    loss = ref.loss_fn(logits, tgt)
    gs = torch.autograd.grad(loss, [q[n] for n in names])
    return logits.detach(), float(loss), {n: g.detach() for n, g in zip(names, gs)}


def finite_difference_check(p64, idx, tgt, grads, cfg):
    """Central differences in float64 against autograd for a few scalar entries."""
    C, NH, NKV, D, Fh, V = ref.dims(cfg)
    probes = [
        ("wte.weight", (V - 1, 3)),                    # row looked up at step 0
        ("lm_head.weight", (V - 1, 30)),               # row that is a target at step 0
        ("lm_head.weight", (40, 7)),
        ("h.0.attn.c_attn.weight", (2, 5)),            # q column (rotated, first half)
        ("h.1.attn.c_attn.weight", (9, NH * D + 6)),   # k column (rotated, second half)
        ("h.0.attn.c_attn.weight", (30, (NH + NKV) * D + 11)),  # v column of kv head 1
        ("h.1.attn.c_proj.weight", (17, 4)),
        ("h.0.mlp.c_fc.weight", (3, 12)),              # gate
        ("h.1.mlp.c_fc.weight", (20, Fh + 33)),        # up
        ("h.0.mlp.c_proj.weight", (39, 31)),
        ("h.1.ln_1.weight", (5,)),
        ("h.0.ln_2.weight", (28,)),
        ("ln_f.weight", (13,)),
    ]
    eps = 1e-5  # truncation error ~eps^2, round-off ~1e-16*loss/eps: both ~1e-10
    worst = 0.0
    with torch.no_grad():
        for name, ix in probes:
            t = p64[name]
            old = float(t[ix])
            t[ix] = old + eps
            lp = float(ref.loss_fn(ref.forward(p64, idx, cfg), tgt))
            t[ix] = old - eps
            lm = float(ref.loss_fn(ref.forward(p64, idx, cfg), tgt))
            t[ix] = old
            fd = (lp - lm) / (2 * eps)
            ag = float(grads[name][ix])
            err = abs(fd - ag) / max(abs(ag), 1e-3)  # relative, absolute below 1e-3
            worst = max(worst, err)
            print("  fd check %-24s %-10s autograd % .10e  fd % .10e  err %.1e"
                  % (name, str(ix), ag, fd, err))
            assert err < 1e-6, "finite-difference mismatch for %s%s" % (name, ix)
    return worst


def sensitivity_check(p64, idx, tgt, logits0, grads0, cfg, names):
    """Each plausible layout mistake must move the fixture far beyond loom's fp32 tolerances
    (tests/support/tolerance.h: 1e-6 forward, 1e-5 gradients), so the C++ test can catch it."""
    for mutate in ("no_rope", "interleaved", "theta_1e4", "kv_modulo"):
        lg, _, g = grads_of(p64, idx, tgt, cfg, names, mutate)
        dl = float((lg - logits0).norm() / logits0.norm())
        dg = max(float((g[n] - grads0[n]).norm() / grads0[n].norm())
                 for n in names if "c_attn" in n)
        print("  %-12s logits rel %.1e   worst c_attn grad rel %.1e" % (mutate, dl, dg))
        assert dl > 100 * 1e-6 and dg > 100 * 1e-5, "the fixture does not see mutation " + mutate


def manual_adamw(params, grads_per_step):
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
            p[k] -= lr * (m[k] / (1 - b1 ** s)) / (torch.sqrt(v2[k] / (1 - b2 ** s)) + eps)
    return p


def train_three_steps(params, names, inputs, targets, grads0, cfg):
    """torch.optim.AdamW with clip_grad_norm_, decay on >= 2-D tensors; returns norms, losses."""
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
        loss = ref.loss_fn(ref.forward(params, inputs[s], cfg), targets[s])
        loss.backward()
        if s == 0:
            for n in names:
                assert torch.equal(params[n].grad, grads0[n]), n
        norm = float(torch.nn.utils.clip_grad_norm_(all_params, max_norm=OPT["grad_clip"]))
        grad_norms.append(norm)
        losses.append(float(loss))
        print("step %d: loss %.12f  grad_norm %.12f  clip %s" % (
            s, losses[-1], norm, "ACTIVE" if norm > OPT["grad_clip"] else "inactive"))
        assert abs(norm - OPT["grad_clip"]) > 0.02 * OPT["grad_clip"], "norm too close to clip"
        opt.step()
    assert grad_norms[0] > OPT["grad_clip"], "clipping must be active at step 0"
    assert any(n < OPT["grad_clip"] for n in grad_norms), "want one unclipped step too"
    return grad_norms, losses


def sha256(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


# ---- writing (deterministic: no timestamps, fixed order) ---------------------------------------
def new_group(parent, name):
    gcpl = h5py.h5p.create(h5py.h5p.GROUP_CREATE)
    gcpl.set_obj_track_times(False)
    return h5py.Group(h5py.h5g.create(parent.id, name.encode(), gcpl=gcpl))


def put(group, name, arr):
    group.create_dataset(name, data=np.ascontiguousarray(arr), track_times=False)


INT_ATTRS = ("n_layer", "n_head", "n_kv_head", "d_model", "ffn_hidden", "vocab_size",
             "max_positions", "seq_len", "batch", "steps")
FLOAT_ATTRS = ("rope_theta", "norm_eps")


def write_h5(out_dir, cfg, w32, inputs, targets, logits, loss, grads, grad_norms, losses,
             after3):
    wpath = os.path.join(out_dir, "llama_tiny_weights.h5")
    fpath = os.path.join(out_dir, "llama_tiny_fixture.h5")
    names = [n for n, _, _ in ref.param_specs(cfg)]
    with h5py.File(wpath, "w", libver="earliest") as f:
        for n in names:
            put(f, n, w32[n].numpy().astype(np.float32))
    with h5py.File(fpath, "w", libver="earliest") as f:
        for k in INT_ATTRS:
            f.attrs[k] = np.int64(cfg[k])
        for k in FLOAT_ATTRS:
            f.attrs[k] = np.float64(cfg[k])
        f.attrs["tie_embeddings"] = np.int64(0)
        for k in ("lr", "beta1", "beta2", "eps", "weight_decay", "grad_clip"):
            f.attrs[k] = np.float64(OPT[k])
        f.attrs["init_seed"] = np.int64(INIT_SEED)
        f.attrs["data_seed"] = np.int64(DATA_SEED)
        f.attrs["arch"] = np.bytes_("llama")
        f.attrs["generator"] = np.bytes_(
            "tests/reference/make_llama_fixtures.py torch %s float64 reference" % torch.__version__)
        put(f, "inputs", inputs.numpy().astype(np.int32))
        put(f, "targets", targets.numpy().astype(np.int32))
        put(f, "logits", logits.numpy().astype(np.float64))
        put(f, "loss", np.array([loss], dtype=np.float64))
        put(f, "grad_norm", np.array(grad_norms, dtype=np.float64))
        put(f, "losses", np.array(losses, dtype=np.float64))
        for grp, vals in (("grads", grads), ("after3", after3)):
            g = new_group(f, grp)
            for n in names:
                put(g, n, vals[n].numpy().astype(np.float64))
    return wpath, fpath


def write_hf(out_dir, cfg, sd):
    """config.json, two shards (layer 1's attention in the first, its MLP and norms in the
    second: one layer spans both files), model.safetensors.index.json. Tensors in each shard
    in name order, as the safetensors library writes them."""
    d = os.path.join(out_dir, "llama_tiny_hf")
    os.makedirs(d, exist_ok=True)
    first = lambda n: (n.startswith("model.embed_tokens") or n.startswith("model.layers.0.")  # noqa
                       or n.startswith("model.layers.1.self_attn."))
    shards = {SHARD1: sorted(n for n in sd if first(n)),
              SHARD2: sorted(n for n in sd if not first(n))}
    weight_map, total = {}, 0
    for fname, keys in shards.items():
        entries = [(n, "F32", sd[n].shape, sd[n].astype("<f4").tobytes()) for n in keys]
        write_safetensors(os.path.join(d, fname), entries, {"format": "pt"})
        for n in keys:
            weight_map[n] = fname
            total += sd[n].nbytes
    index = {"metadata": {"total_size": total}, "weight_map": dict(sorted(weight_map.items()))}
    paths = []
    for fname, obj in (("config.json", ref.hf_config(cfg)),
                       ("model.safetensors.index.json", index)):
        with open(os.path.join(d, fname), "w") as f:
            f.write(json.dumps(obj, indent=2, sort_keys=True) + "\n")
        paths.append(os.path.join(d, fname))
    return paths + [os.path.join(d, SHARD1), os.path.join(d, SHARD2)]


def read_hf(out_dir):
    """Independent re-read of the HF copy through its index: name -> float32 array."""
    d = os.path.join(out_dir, "llama_tiny_hf")
    with open(os.path.join(d, "model.safetensors.index.json")) as f:
        index = json.load(f)
    out, total = {}, 0
    for fname in sorted(set(index["weight_map"].values())):
        hdr, got = read_safetensors(os.path.join(d, fname))
        assert hdr["__metadata__"] == {"format": "pt"}
        for n, (dt, v) in got.items():
            assert dt == "F32" and index["weight_map"][n] == fname and n not in out, n
            out[n] = v
            total += v.nbytes
    assert sorted(out) == sorted(index["weight_map"]), "index and shards disagree"
    assert total == index["metadata"]["total_size"]
    return out


def verify_h5(wpath, fpath, cfg, w32, grads, after3):
    specs = ref.param_specs(cfg)
    B, T, S, V = cfg["batch"], cfg["seq_len"], cfg["steps"], cfg["vocab_size"]
    with h5py.File(wpath, "r") as f:
        assert sorted(f.keys()) == sorted(n for n, _, _ in specs), "weights: dataset names"
        for n, shape, _ in specs:
            assert f[n].shape == shape and f[n].dtype == np.float32, (n, f[n].shape)
            assert np.array_equal(f[n][()], w32[n].numpy()), n
    with h5py.File(fpath, "r") as f:
        for k in INT_ATTRS + FLOAT_ATTRS:
            assert f.attrs[k] == cfg[k], k
        for k in OPT:
            assert float(f.attrs[k]) == OPT[k], k
        assert f["inputs"].shape == (S, B, T) and f["inputs"].dtype == np.int32
        assert f["targets"].shape == (S, B, T) and f["targets"].dtype == np.int32
        assert f["logits"].shape == (B, T, V) and f["logits"].dtype == np.float64
        assert f["loss"].shape == (1,) and f["losses"][0] == f["loss"][0]
        assert f["grad_norm"].shape == (S,) and f["losses"].shape == (S,)
        for grp, vals in (("grads", grads), ("after3", after3)):
            assert sorted(f[grp].keys()) == sorted(n for n, _, _ in specs), grp
            for n, shape, _ in specs:
                assert f[grp][n].shape == shape and f[grp][n].dtype == np.float64, (grp, n)
                assert np.array_equal(f[grp][n][()], vals[n].numpy()), (grp, n)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    here = os.path.dirname(os.path.abspath(__file__))
    ap.add_argument("--out-dir", default=os.path.join(here, "fixtures"),
                    help="output folder (default tests/reference/fixtures)")
    args = ap.parse_args()
    torch.set_num_threads(1)  # deterministic reduction order
    torch.use_deterministic_algorithms(True)
    cfg = CFG
    C, NH, NKV, D, Fh, V = ref.dims(cfg)
    assert V % 128 != 0 and C % NH == 0 and NH % NKV == 0 and D % 2 == 0 and NKV < NH

    g = torch.Generator().manual_seed(7)
    x = torch.randn(3, 5, 40, generator=g, dtype=torch.float64) * 3
    assert torch.allclose(x * torch.sigmoid(x), F.silu(x), rtol=0, atol=1e-14), "silu"

    w32 = init_weights_fp32(cfg)
    inputs, targets = make_batches(cfg)
    names = [n for n, _, _ in ref.param_specs(cfg)]
    init64 = {n: w32[n].to(torch.float64) for n in names}

    logits0, loss0, grads0 = grads_of(init64, inputs[0], targets[0], cfg, names)
    print("step-0 loss %.12f (ln V = %.6f)" % (loss0, math.log(V)))
    print("finite-difference check (float64, central, h=1e-5):")
    p_det = {n: t.clone() for n, t in init64.items()}
    print("  worst relative error %.2e" % finite_difference_check(
        p_det, inputs[0], targets[0], grads0, cfg))
    print("layout mistakes the fixture sees:")
    sensitivity_check(init64, inputs[0], targets[0], logits0, grads0, cfg, names)

    params = {n: init64[n].clone().requires_grad_(True) for n in names}
    grad_norms, losses = train_three_steps(params, names, inputs, targets, grads0, cfg)
    assert losses[0] == loss0 and abs(grad_norms[0] - global_norm(grads0.values())) < 1e-12
    after3 = {n: params[n].detach().clone() for n in names}

    manual = manual_adamw(init64, lambda p: (grads_of(p, inputs[s], targets[s], cfg, names)[2]
                                             for s in range(cfg["steps"])))
    diff = max(float((manual[n] - after3[n]).abs().max()) for n in names)
    print("manual AdamW vs torch.optim.AdamW: max abs diff %.2e" % diff)
    assert diff < 1e-12, "AdamW cross-check failed"

    os.makedirs(args.out_dir, exist_ok=True)
    wpath, fpath = write_h5(args.out_dir, cfg, w32, inputs, targets, logits0, loss0, grads0,
                            grad_norms, losses, after3)
    verify_h5(wpath, fpath, cfg, w32, grads0, after3)
    sd = ref.to_hf({n: t.numpy() for n, t in w32.items()}, cfg)
    hf_paths = write_hf(args.out_dir, cfg, sd)

    # The HF copy, re-read through its index, run by the second formulation.
    back = read_hf(args.out_dir)
    assert sorted(back) == sorted(sd) and all(np.array_equal(back[n], sd[n]) for n in sd)
    hf64 = {n: torch.from_numpy(v.astype(np.float64)) for n, v in back.items()}
    with torch.no_grad():
        alt = ref.hf_forward(hf64, inputs[0], cfg)
        alt_loss = float(ref.hf_loss(alt, targets[0]))
    dl = float((alt - logits0).abs().max())
    print("HF-named per-head forward (complex RoPE, repeat_interleave) vs reference: "
          "max |dlogits| %.2e, |dloss| %.2e" % (dl, abs(alt_loss - loss0)))
    assert dl < 1e-12 and abs(alt_loss - loss0) < 1e-12, "independent forward disagrees"

    for pth in [wpath, fpath] + hf_paths:
        print("%s  %s  (%d bytes)" % (sha256(pth), os.path.relpath(pth), os.path.getsize(pth)))
    print("ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
