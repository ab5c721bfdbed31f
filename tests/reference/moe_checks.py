"""Self-checks of make_moe_fixtures.py: finite differences, dense vs sparse, sensitivity, AdamW."""
import math

import torch

import moe_reference as ref

REF_FORWARD, REF_GRAD = 1e-6, 1e-5  # tests/support/tolerance.h: kRefForward, kRefGrad
CLIP_EPS = 1e-6  # torch.nn.utils.clip_grad_norm_: coef = clip / (norm + 1e-6)


def global_norm(tensors):
    return math.sqrt(sum(float((t.double() ** 2).sum()) for t in tensors))


def finite_difference_check(p64, idx, tgt, base, cfg):
    """Central differences of the objective against autograd. Top-k (and so dropping) is
    piecewise constant in the weights: h = 1e-5 moves a router logit by about 1e-5 * |x_c| (a
    few 1e-5), below the smallest gap the script allows between competing logits, and every
    evaluation asserts that no choice and no kept flag changed, so both sides of each difference
    see the same smooth function."""
    C, E, K, Fh, _ = ref.moe_dims(cfg)
    llama = cfg["arch"] == "llama"
    probes = [
        ("wte.weight", (cfg["vocab_size"] - 1, 3)),
        ("h.0.attn.c_attn.weight", (2, 5)),
        ("h.1.attn.c_proj.weight", (17, 4)),
        ("h.0.ln_2.weight", (28,)),
        ("h.0.mlp.router.weight", (3, 1)),
        ("h.1.mlp.router.weight", (20, 0)),
        ("h.1.mlp.router.weight", (9, E - 1)),
        ("h.0.mlp.experts.c_fc.weight", (1 * C + 4, 7)),            # expert 1 (gate for llama)
        ("h.1.mlp.experts.c_fc.weight", (3 * C + 30, 2 * Fh - 1 if llama else Fh - 1)),
        ("h.0.mlp.experts.c_proj.weight", (2 * Fh + 5, 11)),        # expert 2
        ("h.1.mlp.experts.c_proj.weight", (0 * Fh + 15, 31)),       # expert 0
        ("ln_f.weight", (13,)),
    ]
    if llama:
        probes.append(("lm_head.weight", (40, 7)))
    else:
        probes += [("h.0.mlp.experts.c_fc.bias", (3, 9)), ("h.1.mlp.experts.c_proj.bias", (1, 6)),
                   ("wpe.weight", (7, 0))]
    h = 1e-5  # truncation ~h^2 * f''' ~ 1e-10, round-off ~1e-16 * 4.6 / h ~ 5e-11
    worst = 0.0
    with torch.no_grad():
        for name, ix in probes:
            t = p64[name]
            old = float(t[ix])
            vals = []
            for step in (h, -h):
                t[ix] = old + step
                r = ref.evaluate(p64, idx, tgt, cfg, None, grads=False)
                assert ref.same_routing(r["recs"], base["recs"]), "routing moved: %s%s" % (name, ix)
                vals.append(r["ce"] + sum(r["aux"]) + sum(r["z"]))
            t[ix] = old
            fd = (vals[0] - vals[1]) / (2 * h)
            ag = float(base["grads"][name][ix])
            err = abs(fd - ag) / max(abs(ag), 1e-3)  # relative, absolute below 1e-3
            worst = max(worst, err)
            print("  fd %-30s %-10s autograd % .10e  fd % .10e  err %.1e"
                  % (name, str(ix), ag, fd, err))
            assert err < 1e-6, "finite-difference mismatch for %s%s" % (name, ix)
    return worst


def rel(a, b):
    return float((a - b).norm() / b.norm())


def worst_grad_rel(g, g0):
    return max((rel(g[n], g0[n]), n) for n in g0)


def dense_check(p64, idx, tgt, base, cfg, names):
    """The dense formulation (tensor-op routing, every token through every expert, a kept-gate
    matrix) against the sparse one: routing equal, logits, losses and gradients to 1e-13."""
    d = ref.evaluate(p64, idx, tgt, cfg, names, impl="dense")
    assert ref.same_routing(d["recs"], base["recs"]), "dense and sparse routing differ"
    dl = float((d["logits"] - base["logits"]).abs().max())
    dlo = max(abs(a - b) for a, b in zip(d["aux"] + d["z"], base["aux"] + base["z"]))
    dg = max(float((d["grads"][n] - base["grads"][n]).abs().max()) for n in names)
    print("dense vs sparse MoE: routing equal, max |dlogits| %.1e, |d aux/z| %.1e, "
          "max |dgrad| %.1e" % (dl, dlo, dg))
    assert dl < 1e-13 and dlo < 1e-15 and dg < 1e-13, "dense and sparse formulations disagree"
    return max(dl, dg)


def sensitivity_check(p64, idx, tgt, base, cfg, names, mode):
    """Each term and each plausible routing mistake must move the fixture far beyond loom's fp32
    tolerances (100x): the aux and z terms must show in the router's gradient."""
    checks = [("no aux loss", dict(aux_loss_coef=0.0), None),
              ("no z-loss", dict(z_loss_coef=0.0), None),
              ("renormalized gates", {}, "renormalize"),
              ("f, P over the batch", {}, "aux_global")]
    if mode == "capacity":
        checks += [("token-major priority", {}, "token_major"),
                   ("f after dropping", {}, "f_after_drop"),
                   ("dropless", dict(capacity_factor=0.0), None)]
    for label, over, mutate in checks:
        r = ref.evaluate(p64, idx, tgt, dict(cfg, **over), names, mutate=mutate)
        dl = rel(r["logits"], base["logits"])
        dloss = max(abs(a - b) / b for a, b in zip(r["aux"] + r["z"], base["aux"] + base["z"]))
        dg, worst = worst_grad_rel(r["grads"], base["grads"])
        print("  %-22s logits rel %.1e  aux/z rel %.1e  grads rel %.1e (%s)"
              % (label, dl, dloss, dg, worst))
        assert dg > 100 * REF_GRAD, "the fixture's gradients do not see: " + label


def manual_adamw(init64, names, grads_of_step, clip, steps, opt):
    """Independent AdamW + clipping (decay as ref.decays) to cross-check torch.optim."""
    lr, b1, b2, eps, wd = (opt[k] for k in ("lr", "beta1", "beta2", "eps", "weight_decay"))
    p = {k: v.clone() for k, v in init64.items()}
    m = {k: torch.zeros_like(v) for k, v in p.items()}
    v2 = {k: torch.zeros_like(v) for k, v in p.items()}
    for s in range(1, steps + 1):
        g = grads_of_step(s - 1, p)
        norm = global_norm(g.values())
        scale = clip / (norm + CLIP_EPS) if norm > clip else 1.0
        for k in names:
            gk = g[k] * scale
            if ref.decays(k, tuple(p[k].shape)):
                p[k] -= lr * wd * p[k]
            m[k] = b1 * m[k] + (1 - b1) * gk
            v2[k] = b2 * v2[k] + (1 - b2) * gk * gk
            p[k] -= lr * (m[k] / (1 - b1 ** s)) / (torch.sqrt(v2[k] / (1 - b2 ** s)) + eps)
    return p


def uniform_router_check(p64, idx, tgt, cfg):
    """A zero router: p = 1/E everywhere, so every token ties on every expert and picks experts
    0..K-1 (ties to the lower index); aux = aux_coef per layer (docs/moe.md), z-loss =
    z_coef * ln(E)^2; with capacity, expert j keeps the first `cap` tokens of each sequence."""
    C, E, K, _, cap = ref.moe_dims(cfg)
    q = {n: (torch.zeros_like(t) if n.endswith("mlp.router.weight") else t) for n, t in p64.items()}
    T = cfg["seq_len"]
    want_kept = (torch.arange(T) < cap) if cap > 0 else torch.ones(T, dtype=torch.bool)
    for impl in ("sparse", "dense"):
        r = ref.evaluate(q, idx, tgt, cfg, None, impl=impl, grads=False)
        for a, z, rec in zip(r["aux"], r["z"], r["recs"]):
            assert abs(a - cfg["aux_loss_coef"]) < 1e-15, (impl, a)
            assert abs(z - cfg["z_loss_coef"] * math.log(E) ** 2) < 1e-15, (impl, z)
            assert (rec["choices"] == torch.arange(K)).all(), impl + ": ties not to the lower index"
            assert (rec["kept"] == want_kept[None, :, None]).all(), impl + ": uniform capacity"
    print("zero router (all experts tie): choices 0..%d, aux = coef, z = coef ln(E)^2, kept: %s"
          % (K - 1, "the first %d tokens" % cap if cap > 0 else "all"))
