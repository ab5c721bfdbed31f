#!/usr/bin/python3
"""Write loom's golden Mixture-of-Experts fixtures from a plain-PyTorch float64 reference.

Run with Debian's interpreter (it has python3-torch, python3-h5py, python3-numpy):

    /usr/bin/python3 tests/reference/make_moe_fixtures.py [--out-dir tests/reference/fixtures]

Outputs (see tests/reference/README.md), for the GPT-2 and the Llama family:
  moe_<arch>_weights.h5            canonical float32 weights (loom names, [in, out])
  moe_<arch>_dropless_fixture.h5   capacity_factor 0: every assignment kept
  moe_<arch>_capacity_fixture.h5   capacity_factor 1.0: some assignments dropped
Each fixture holds inputs/targets, step-0 logits and losses (cross-entropy, per-layer aux and
z-loss), every parameter's gradient of the objective CE + aux + z, the routing of every step
(top-k choices, kept mask, tokens per expert, dropped count) and the weights after 3 clipped
AdamW steps on that objective.

The model is moe_reference.py (docs/moe.md). Weights are drawn as float32 and upcast to
float64; everything afterwards is float64. Deterministic: a second run writes byte-identical
files (their sha256 is printed).
"""
import argparse
import math
import os
import sys

import h5py
import numpy as np
import torch

import make_llama_fixtures as lf
import moe_checks as chk
import moe_reference as ref

COMMON = dict(
    n_layer=2,
    n_head=4,
    d_model=32,
    vocab_size=97,     # not a multiple of 128: loom's vocab padding is exercised
    max_positions=8,   # = seq_len (gpt2: rows of wpe, all used; llama: a bound only)
    seq_len=8,
    batch=4,
    steps=3,
    ffn_hidden=16,     # each expert's width (llama: c_fc has 2F = 32 columns, gate | up)
    num_experts=4,
    top_k=2,
    aux_loss_coef=0.01,
    z_loss_coef=0.001,
)
FAMILIES = {
    "gpt2": dict(arch="gpt2"),
    "llama": dict(arch="llama", n_kv_head=2, rope_theta=100.0, norm_eps=1e-5),
}
# capacity 1.0: ceil(1.0 * T * k / E) = 4 slots per expert and sequence for its 16 assignments,
# so any expert chosen more than 4 times in a sequence drops assignments.
MODES = {"dropless": 0.0, "capacity": 1.0}
OPT = dict(lr=1e-2, beta1=0.9, beta2=0.95, eps=1e-8, weight_decay=0.1)  # the llama fixture's
# Fixed literals chosen after inspecting the gradient norms of the objective (printed below;
# gpt2 about 1.50, 1.35, 1.16, llama 1.70, 1.74, 1.41 in both modes): clipping is ACTIVE on
# steps 0 and 1 and inactive on step 2, every norm >= 7% from its threshold (> 2% asserted).
GRAD_CLIP = {("gpt2", "dropless"): 1.26, ("gpt2", "capacity"): 1.26,
             ("llama", "dropless"): 1.55, ("llama", "capacity"): 1.55}
INIT_SEED = 1337
# STORE_F32: grads/ and after3/ (one tensor per parameter: most of each file) are stored as
# float32, which halves the files. Their rounding, 6e-8 relative, is 170x below the 1e-5
# gradient bound and, for weights of magnitude <= 1.2, 7e-8 absolute against the 3e-5 of the
# after-3-steps bound (1e-3 of 3 * lr). Everything else stays float64.
# The first seed from 4240 whose trajectories (4 fixtures x 3 steps) keep every routing gap
# >= MIN_GAP (here >= 1.1e-3) and let one clip threshold per fixture sit > 2% from all norms.
DATA_SEED = 4260
ROUTER_STD = 0.1  # router logits of about 0.5: decisive top-k choices and a visible z-loss
# fp32 router logits are off by about 1e-6 of their O(1) inputs (tolerance.h's kRefForward),
# so loom picks the same experts as long as adjacent logits among each token's top k+1 are
# further apart than that: required >= 1e-4 (100x) at every step of the trajectory.
MIN_GAP = 1e-4


def family_cfg(arch, mode):
    return dict(COMMON, **FAMILIES[arch], capacity_factor=MODES[mode])


def init_weights_fp32(cfg):
    """One torch.randn float32 draw per parameter in canonical order: matrices and embeddings
    N(0, 0.02), residual projections (gpt2 c_proj) N(0, 0.02/sqrt(2 n_layer)), biases N(0, 0.02),
    norm gains 1 + N(0, 0.1), the router N(0, ROUTER_STD)."""
    torch.manual_seed(INIT_SEED)
    std_res = 0.02 / math.sqrt(2 * cfg["n_layer"])
    scale = {"matrix": 0.02, "residual": std_res, "bias": 0.02, "router": ROUTER_STD}
    out = {}
    for name, shape, kind in ref.param_specs(cfg):
        z = torch.randn(shape, dtype=torch.float32)
        out[name] = (1.0 + z * 0.1 if kind == "gain" else z * scale[kind]).contiguous()
    return out


def make_batches(cfg):
    g = torch.Generator().manual_seed(DATA_SEED)
    shape = (cfg["steps"], cfg["batch"], cfg["seq_len"])
    V = cfg["vocab_size"]
    inputs = torch.randint(0, V, shape, generator=g, dtype=torch.int64)
    targets = torch.randint(0, V, shape, generator=g, dtype=torch.int64)
    inputs[0, 0, 0], inputs[0, 1, 3] = V - 1, 0  # the vocab edges on step 0
    targets[0, 0, 5], targets[0, 1, 0] = V - 1, 0
    return inputs, targets


def adamw_groups(params, names):
    decay = [params[n] for n in names if ref.decays(n, tuple(params[n].shape))]
    rest = [params[n] for n in names if not ref.decays(n, tuple(params[n].shape))]
    return [{"params": decay, "weight_decay": OPT["weight_decay"]},
            {"params": rest, "weight_decay": 0.0}]


def train_three_steps(init64, names, inputs, targets, base, cfg, clip):
    """torch.optim.AdamW on the objective with clip_grad_norm_; returns per-step records."""
    params = {n: init64[n].clone().requires_grad_(True) for n in names}
    opt = torch.optim.AdamW(adamw_groups(params, names), lr=OPT["lr"],
                            betas=(OPT["beta1"], OPT["beta2"]), eps=OPT["eps"],
                            foreach=False, maximize=False, amsgrad=False)
    steps = []
    for s in range(cfg["steps"]):
        opt.zero_grad(set_to_none=True)
        logits, auxes, zs, recs = ref.forward(params, inputs[s], cfg)
        ce = ref.ce_loss(logits, targets[s])
        (ce + sum(auxes) + sum(zs)).backward()
        if s == 0:
            for n in names:
                assert torch.equal(params[n].grad, base["grads"][n]), n
        norm = float(torch.nn.utils.clip_grad_norm_([params[n] for n in names], max_norm=clip))
        gap = ref.routing_gap(recs, cfg["top_k"])
        steps.append(dict(ce=float(ce), aux=[float(a) for a in auxes], z=[float(z) for z in zs],
                          recs=recs, norm=norm, gap=gap))
        dropped = [int((~r["kept"]).sum()) for r in recs]
        print("  step %d: CE %.12f  aux %s  z %s  dropped %s  grad_norm %.6f (clip %s)  gap %.1e"
              % (s, float(ce), ["%.6f" % a for a in steps[-1]["aux"]],
                 ["%.6f" % z for z in steps[-1]["z"]], dropped, norm,
                 "ACTIVE" if norm > clip else "inactive", gap))
        assert gap >= MIN_GAP, "router logits too close at step %d" % s
        assert abs(norm - clip) > 0.02 * clip, "norm too close to clip"
        opt.step()
    norms = [st["norm"] for st in steps]
    assert norms[0] > clip and any(n < clip for n in norms), "want clipped and unclipped"
    return steps, {n: params[n].detach().clone() for n in names}


# ---- writing (deterministic: no timestamps, fixed order) ---------------------------------------
INT_ATTRS = ("n_layer", "n_head", "d_model", "ffn_hidden", "vocab_size", "max_positions",
             "seq_len", "batch", "steps", "num_experts", "top_k")
FLOAT_ATTRS = ("capacity_factor", "aux_loss_coef", "z_loss_coef")


def routing_arrays(steps, cfg):
    """choices, kept (S, L, B, T, K); gates (S, L, B, T, K); tokens_per_expert (S, L, E);
    dropped (S, L)."""
    E = cfg["num_experts"]
    ch = np.stack([np.stack([r["choices"].numpy() for r in st["recs"]]) for st in steps])
    kp = np.stack([np.stack([r["kept"].numpy() for r in st["recs"]]) for st in steps])
    gates = np.stack([np.stack([torch.gather(r["prob"].detach(), -1, r["choices"]).numpy()
                                for r in st["recs"]]) for st in steps])
    tpe = np.stack([np.stack([ref.tokens_per_expert(r, E).numpy() for r in st["recs"]])
                    for st in steps])
    return (ch.astype(np.int32), kp.astype(np.int32), gates.astype(np.float64),
            tpe.astype(np.int64), (1 - kp).sum(axis=(2, 3, 4)).astype(np.int64))


def write_weights(path, cfg, w32):
    with h5py.File(path, "w", libver="earliest") as f:
        for n, _, _ in ref.param_specs(cfg):
            lf.put(f, n, w32[n].numpy().astype(np.float32))


def write_fixture(path, cfg, clip, inputs, targets, base, steps, after3):
    names = [n for n, _, _ in ref.param_specs(cfg)]
    llama = cfg["arch"] == "llama"
    with h5py.File(path, "w", libver="earliest") as f:
        for k in INT_ATTRS + (("n_kv_head",) if llama else ()):
            f.attrs[k] = np.int64(cfg[k])
        for k in FLOAT_ATTRS + (("rope_theta", "norm_eps") if llama else ()):
            f.attrs[k] = np.float64(cfg[k])
        f.attrs["capacity"] = np.int64(ref.moe_dims(cfg)[4])
        f.attrs["tie_embeddings"] = np.int64(0 if llama else 1)
        for k in OPT:
            f.attrs[k] = np.float64(OPT[k])
        f.attrs["grad_clip"] = np.float64(clip)
        f.attrs["init_seed"] = np.int64(INIT_SEED)
        f.attrs["data_seed"] = np.int64(DATA_SEED)
        f.attrs["arch"] = np.bytes_(cfg["arch"])
        f.attrs["generator"] = np.bytes_(
            "tests/reference/make_moe_fixtures.py torch %s float64 reference" % torch.__version__)
        lf.put(f, "inputs", inputs.numpy().astype(np.int32))
        lf.put(f, "targets", targets.numpy().astype(np.int32))
        lf.put(f, "logits", base["logits"].numpy().astype(np.float64))
        lf.put(f, "loss", np.array([base["ce"]], dtype=np.float64))
        lf.put(f, "losses", np.array([st["ce"] for st in steps], dtype=np.float64))
        lf.put(f, "aux_loss", np.array([st["aux"] for st in steps], dtype=np.float64))
        lf.put(f, "z_loss", np.array([st["z"] for st in steps], dtype=np.float64))
        lf.put(f, "grad_norm", np.array([st["norm"] for st in steps], dtype=np.float64))
        for k, arr in zip(("choices", "kept", "gates", "tokens_per_expert", "dropped"),
                          routing_arrays(steps, cfg)):
            lf.put(f, k, arr)
        for grp, vals in (("grads", base["grads"]), ("after3", after3)):
            g = lf.new_group(f, grp)
            for n in names:  # float32: see STORE_F32
                lf.put(g, n, vals[n].numpy().astype(np.float32))


def verify(wpath, fpath, cfg, w32, base, steps, after3):
    specs = ref.param_specs(cfg)
    S, L, B, T = cfg["steps"], cfg["n_layer"], cfg["batch"], cfg["seq_len"]
    E, K, V = cfg["num_experts"], cfg["top_k"], cfg["vocab_size"]
    with h5py.File(wpath, "r") as f:
        assert sorted(f.keys()) == sorted(n for n, _, _ in specs), "weights: dataset names"
        for n, shape, _ in specs:
            assert f[n].shape == shape and f[n].dtype == np.float32, (n, f[n].shape)
            assert np.array_equal(f[n][()], w32[n].numpy()), n
    with h5py.File(fpath, "r") as f:
        for k in INT_ATTRS + FLOAT_ATTRS:
            assert f.attrs[k] == cfg[k], k
        assert f["inputs"].shape == (S, B, T) and f["targets"].shape == (S, B, T)
        assert f["logits"].shape == (B, T, V) and f["losses"][0] == f["loss"][0]
        assert f["aux_loss"].shape == (S, L) and f["z_loss"].shape == (S, L)
        for k in ("choices", "kept", "gates"):
            assert f[k].shape == (S, L, B, T, K), k
        tpe, kept = f["tokens_per_expert"][()], f["kept"][()]
        assert tpe.shape == (S, L, E) and (tpe.sum(-1) == B * T * K).all()
        assert np.array_equal(f["dropped"][()], (kept == 0).sum(axis=(2, 3, 4)))
        if cfg["capacity_factor"] == 0:
            assert kept.all()
        for grp, vals in (("grads", base["grads"]), ("after3", after3)):
            assert sorted(f[grp].keys()) == sorted(n for n, _, _ in specs), grp
            for n, shape, _ in specs:
                assert f[grp][n].shape == shape and f[grp][n].dtype == np.float32, (grp, n)
                assert np.array_equal(f[grp][n][()], vals[n].numpy().astype(np.float32)), (grp, n)


def make_family_mode(arch, mode, out_dir, w32):
    cfg = family_cfg(arch, mode)
    clip = GRAD_CLIP[(arch, mode)]
    names = [n for n, _, _ in ref.param_specs(cfg)]
    inputs, targets = make_batches(cfg)
    init64 = {n: w32[n].to(torch.float64) for n in names}
    print("== %s, %s (capacity %d per expert and sequence)" % (arch, mode, ref.moe_dims(cfg)[4]))
    base = ref.evaluate(init64, inputs[0], targets[0], cfg, names)
    print("step-0 CE %.12f (ln V = %.6f), aux %s, z %s, routing gap %.1e" % (
        base["ce"], math.log(cfg["vocab_size"]), base["aux"], base["z"], base["gap"]))
    chk.dense_check(init64, inputs[0], targets[0], base, cfg, names)
    chk.uniform_router_check(init64, inputs[0], targets[0], cfg)
    print("finite differences of the objective (float64, central, h=1e-5):")
    fd = chk.finite_difference_check({n: t.clone() for n, t in init64.items()}, inputs[0],
                                 targets[0], base, cfg)
    print("  worst relative error %.2e" % fd)
    print("what the fixture sees (relative changes; loom's tolerances are 1e-6 and 1e-5):")
    chk.sensitivity_check(init64, inputs[0], targets[0], base, cfg, names, mode)
    print("3 AdamW steps on CE + aux + z, clip %g:" % clip)
    steps, after3 = train_three_steps(init64, names, inputs, targets, base, cfg, clip)
    grads_of_step = lambda s, p: ref.evaluate(p, inputs[s], targets[s], cfg, names)["grads"]  # noqa
    manual = chk.manual_adamw(init64, names, grads_of_step, clip, cfg["steps"], OPT)
    diff = max(float((manual[n] - after3[n]).abs().max()) for n in names)
    print("manual AdamW vs torch.optim.AdamW: max abs diff %.2e" % diff)
    assert diff < 1e-12, "AdamW cross-check failed"
    fpath = os.path.join(out_dir, "moe_%s_%s_fixture.h5" % (arch, mode))
    write_fixture(fpath, cfg, clip, inputs, targets, base, steps, after3)
    return cfg, fpath, base, steps, after3


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    here = os.path.dirname(os.path.abspath(__file__))
    ap.add_argument("--out-dir", default=os.path.join(here, "fixtures"),
                    help="output folder (default tests/reference/fixtures)")
    args = ap.parse_args()
    torch.set_num_threads(1)  # deterministic reduction order
    torch.use_deterministic_algorithms(True)
    os.makedirs(args.out_dir, exist_ok=True)
    paths = []
    for arch in FAMILIES:
        cfg0 = family_cfg(arch, "dropless")
        w32 = init_weights_fp32(cfg0)
        wpath = os.path.join(args.out_dir, "moe_%s_weights.h5" % arch)
        write_weights(wpath, cfg0, w32)
        paths.append(wpath)
        for mode in MODES:
            cfg, fpath, base, steps, after3 = make_family_mode(arch, mode, args.out_dir, w32)
            verify(wpath, fpath, cfg, w32, base, steps, after3)
            paths.append(fpath)
    for pth in paths:
        print("%s  %s  (%d bytes)" % (lf.sha256(pth), os.path.relpath(pth), os.path.getsize(pth)))
    print("ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
