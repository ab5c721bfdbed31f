"""loom's Mixture-of-Experts models (docs/moe.md) in float64 PyTorch: GPT-2 and Llama blocks.

Used by make_moe_fixtures.py. Attention and norms come from the dense references
(make_gpt2_fixtures.py, llama_reference.py); only the feed-forward part differs. Two
formulations of the MoE layer, written independently:

moe_sparse(...)  routing with explicit Python loops (sort each token's experts by (-p, index),
                 admit assignments one by one in GShard's priority order), then each expert's MLP
                 on the rows it kept and a per-token sum of gate * output.
moe_dense(...)   routing with tensor ops (stable sort, one-hot masks, a cumulative count per
                 choice rank), then every token through every expert, weighted by a (tokens, E)
                 matrix that holds the kept gates and zeros elsewhere.

Both return the layer output and its routing record; the losses (load balancing, z-loss) are
computed once from the router probabilities and the choices (moe_losses).
"""
import math

import torch

import llama_reference as llama
import make_gpt2_fixtures as gpt2

F64 = torch.float64


def moe_dims(cfg):
    """C, E (experts), K (top_k), F (expert width), capacity per sequence (0: dropless)."""
    C, E, K, T = cfg["d_model"], cfg["num_experts"], cfg["top_k"], cfg["seq_len"]
    f = cfg["capacity_factor"]
    cap = math.ceil(f * T * K / E) if f > 0 else 0
    return C, E, K, cfg["ffn_hidden"], cap


def param_specs(cfg):
    """(loom name, [in, out] shape, kind) in loom's canonical order; kind selects the init."""
    C, E, K, Fh, _ = moe_dims(cfg)
    V, L = cfg["vocab_size"], cfg["n_layer"]
    is_llama = cfg["arch"] == "llama"
    specs = [("wte.weight", (V, C), "matrix")]
    if not is_llama:
        specs.append(("wpe.weight", (cfg["max_positions"], C), "matrix"))
    for i in range(L):
        h = "h.%d." % i
        if is_llama:
            qkv = (cfg["n_head"] + 2 * cfg["n_kv_head"]) * (C // cfg["n_head"])
            specs += [
                (h + "ln_1.weight", (C,), "gain"),
                (h + "attn.c_attn.weight", (C, qkv), "matrix"),  # q | k | v
                (h + "attn.c_proj.weight", (C, C), "matrix"),
                (h + "ln_2.weight", (C,), "gain"),
                (h + "mlp.router.weight", (C, E), "router"),
                (h + "mlp.experts.c_fc.weight", (E * C, 2 * Fh), "matrix"),  # per expert: gate | up
                (h + "mlp.experts.c_proj.weight", (E * Fh, C), "matrix"),
            ]
        else:
            specs += [
                (h + "ln_1.weight", (C,), "gain"),
                (h + "ln_1.bias", (C,), "bias"),
                (h + "attn.c_attn.weight", (C, 3 * C), "matrix"),
                (h + "attn.c_attn.bias", (3 * C,), "bias"),
                (h + "attn.c_proj.weight", (C, C), "residual"),
                (h + "attn.c_proj.bias", (C,), "bias"),
                (h + "ln_2.weight", (C,), "gain"),
                (h + "ln_2.bias", (C,), "bias"),
                (h + "mlp.router.weight", (C, E), "router"),
                (h + "mlp.experts.c_fc.weight", (E * C, Fh), "matrix"),
                (h + "mlp.experts.c_fc.bias", (E, Fh), "bias"),
                (h + "mlp.experts.c_proj.weight", (E * Fh, C), "residual"),
                (h + "mlp.experts.c_proj.bias", (E, C), "bias"),
            ]
    specs.append(("ln_f.weight", (C,), "gain"))
    if is_llama:
        specs.append(("lm_head.weight", (V, C), "matrix"))
    else:
        specs.append(("ln_f.bias", (C,), "bias"))
    return specs


def decays(name, shape):
    """AdamW weight decay: weight matrices and embeddings; never a bias (the experts' (E, F)
    and (E, C) bias tensors are 2-D but are biases)."""
    return len(shape) >= 2 and name.endswith(".weight")


# ---- one expert's MLP --------------------------------------------------------------------------
def expert_mlp(xr, p, h, e, cfg):
    """Expert e of layer prefix h on rows xr (n, C) -> (n, C)."""
    C, _, _, Fh, _ = moe_dims(cfg)
    W1 = p[h + "mlp.experts.c_fc.weight"][e * C: (e + 1) * C]  # (C, F) or (C, 2F)
    W2 = p[h + "mlp.experts.c_proj.weight"][e * Fh: (e + 1) * Fh]  # (F, C)
    if cfg["arch"] == "llama":
        gu = xr @ W1
        g, u = gu[:, :Fh], gu[:, Fh:]
        return (g * torch.sigmoid(g) * u) @ W2
    a = gpt2.gelu_tanh(xr @ W1 + p[h + "mlp.experts.c_fc.bias"][e])
    return a @ W2 + p[h + "mlp.experts.c_proj.bias"][e]


# ---- routing and the layer, first formulation: explicit loops ---------------------------------
def route_loops(p_seq, K, cap, mutate=None):
    """One sequence's router probabilities p_seq (T, E) -> choices[t][j] (expert of token t's
    j-th choice, decreasing p, ties to the lower index) and kept[t][j] (bool)."""
    T, E = p_seq.shape
    choices = []
    for t in range(T):
        order = sorted(range(E), key=lambda e: (-float(p_seq[t, e]), e))
        choices.append(order[:K])
    kept = [[True] * K for _ in range(T)]
    if cap > 0:
        if mutate == "token_major":  # wrong order probe: token by token, all its choices
            queue = [(t, j) for t in range(T) for j in range(K)]
        else:  # GShard: every first choice in token order, then every second choice, ...
            queue = [(t, j) for j in range(K) for t in range(T)]
        load = [0] * E
        for t, j in queue:
            e = choices[t][j]
            if load[e] < cap:
                load[e] += 1
            else:
                kept[t][j] = False
    return choices, kept


def moe_sparse(x, logits, p, h, cfg, mutate=None):
    """x (B, T, C) and router logits (B, T, E) -> output (B, T, C), routing record."""
    B, T, C = x.shape
    _, E, K, _, cap = moe_dims(cfg)
    prob = torch.softmax(logits, dim=-1)  # (B, T, E)
    choices = torch.zeros(B, T, K, dtype=torch.int64)
    kept = torch.zeros(B, T, K, dtype=torch.bool)
    rows_out = []
    for b in range(B):
        ch, kp = route_loops(prob[b].detach(), K, cap, mutate)
        choices[b] = torch.tensor(ch)
        kept[b] = torch.tensor(kp)
        terms = [[] for _ in range(T)]  # terms[t]: gate * y of token t's kept experts
        for e in range(E):
            slots = [(t, j) for t in range(T) for j in range(K) if ch[t][j] == e and kp[t][j]]
            if not slots:
                continue
            ts = [t for t, _ in slots]
            y = expert_mlp(x[b, ts], p, h, e, cfg)  # (n_e, C)
            for r, (t, j) in enumerate(slots):
                gate = prob[b, t, e]
                if mutate == "renormalize":  # wrong gates probe: divide by the top-k sum
                    gate = gate / sum(prob[b, t, c] for c in ch[t])
                terms[t].append(gate * y[r])
        zero = torch.zeros(C, dtype=F64)
        rows_out.append(torch.stack([sum(tt, zero) for tt in terms]))  # (T, C)
    return torch.stack(rows_out), dict(choices=choices, kept=kept, prob=prob)


# ---- second formulation: tensor ops, every token through every expert -------------------------
def route_tensors(prob, K, cap):
    """prob (B, T, E) -> choices (B, T, K), kept (B, T, K) by stable sort and one-hot counts."""
    B, T, E = prob.shape
    order = torch.sort(-prob.detach(), dim=-1, stable=True).indices  # equal p: lower index first
    choices = order[..., :K]
    kept = torch.ones(B, T, K, dtype=torch.bool)
    if cap > 0:
        taken = torch.zeros(B, 1, E, dtype=torch.int64)  # slots used by earlier choice ranks
        for j in range(K):
            onehot = torch.nn.functional.one_hot(choices[..., j], E)  # (B, T, E)
            pos = taken + torch.cumsum(onehot, dim=1) - onehot  # slot this assignment would take
            kept[..., j] = (pos * onehot).sum(-1) < cap
            taken = taken + onehot.sum(dim=1, keepdim=True)
    return choices, kept


def moe_dense(x, logits, p, h, cfg):
    B, T, C = x.shape
    _, E, K, Fh, cap = moe_dims(cfg)
    prob = torch.softmax(logits, dim=-1)
    choices, kept = route_tensors(prob, K, cap)
    onehot = torch.nn.functional.one_hot(choices, E).to(F64)  # (B, T, K, E)
    combine = (onehot * kept[..., None].to(F64)).sum(2) * prob  # (B, T, E): kept gates
    W1 = p[h + "mlp.experts.c_fc.weight"].reshape(E, C, -1)  # (E, C, F or 2F)
    W2 = p[h + "mlp.experts.c_proj.weight"].reshape(E, Fh, C)  # (E, F, C)
    a = torch.einsum("btc,ecf->btef", x, W1)  # (B, T, E, F or 2F)
    if cfg["arch"] == "llama":
        a = torch.nn.functional.silu(a[..., :Fh]) * a[..., Fh:]
        y = torch.einsum("btef,efc->btec", a, W2)
    else:
        a = torch.nn.functional.gelu(a + p[h + "mlp.experts.c_fc.bias"], approximate="tanh")
        y = torch.einsum("btef,efc->btec", a, W2) + p[h + "mlp.experts.c_proj.bias"]
    return torch.einsum("bte,btec->btc", combine, y), dict(choices=choices, kept=kept, prob=prob)


# ---- losses of one layer --------------------------------------------------------------------
def moe_losses(logits, rec, cfg, mutate=None):
    """Load-balancing and z-loss of one layer (each already times its coefficient)."""
    B, T, E = logits.shape
    K = cfg["top_k"]
    prob, choices, kept = rec["prob"], rec["choices"], rec["kept"]
    counted = torch.ones_like(kept) if mutate != "f_after_drop" else kept
    # f[s, e]: fraction of sequence s's T*K assignments that chose e (a count: no gradient)
    f = (torch.nn.functional.one_hot(choices, E) * counted[..., None]).sum((1, 2)).to(F64)
    f = f / (T * K)  # (B, E)
    P = prob.mean(dim=1)  # (B, E)
    if mutate == "aux_global":  # wrong grouping probe: f and P over the whole batch
        per_seq = (f.mean(0) * P.mean(0)).sum()
    else:
        per_seq = (f * P).sum(-1).mean()
    aux = cfg["aux_loss_coef"] * E * per_seq
    z = torch.logsumexp(logits, dim=-1)  # (B, T)
    zl = cfg["z_loss_coef"] * (z * z).mean()
    return aux, zl


def tokens_per_expert(rec, E):
    """(E,) assignments per expert over the batch, counted before dropping."""
    return torch.nn.functional.one_hot(rec["choices"], E).sum((0, 1, 2))


# ---- the model ------------------------------------------------------------------------------
def forward(p, idx, cfg, impl="sparse", mutate=None):
    """Logits (B, T, V), per-layer aux losses, z-losses and routing records."""
    B, T = idx.shape
    is_llama = cfg["arch"] == "llama"
    eps = cfg.get("norm_eps", 1e-5)
    x = p["wte.weight"][idx]  # (B, T, C)
    if not is_llama:
        x = x + p["wpe.weight"][:T].unsqueeze(0)
    auxes, zs, recs = [], [], []
    for i in range(cfg["n_layer"]):
        h = "h.%d." % i
        if is_llama:
            x = x + llama.attention(llama.rmsnorm(x, p[h + "ln_1.weight"], eps), p, h, cfg)
            a = llama.rmsnorm(x, p[h + "ln_2.weight"], eps)
        else:
            x = x + gpt2.attention(gpt2.layer_norm(x, p[h + "ln_1.weight"], p[h + "ln_1.bias"]),
                                   p, h, cfg)
            a = gpt2.layer_norm(x, p[h + "ln_2.weight"], p[h + "ln_2.bias"])
        logits_r = a @ p[h + "mlp.router.weight"]  # (B, T, E)
        if impl == "dense":
            y, rec = moe_dense(a, logits_r, p, h, cfg)
        else:
            y, rec = moe_sparse(a, logits_r, p, h, cfg, mutate)
        aux, zl = moe_losses(logits_r, rec, cfg, mutate)
        rec["logits"] = logits_r.detach()
        x = x + y
        auxes.append(aux)
        zs.append(zl)
        recs.append(rec)
    if is_llama:
        out = llama.rmsnorm(x, p["ln_f.weight"], eps) @ p["lm_head.weight"].t()
    else:
        out = gpt2.layer_norm(x, p["ln_f.weight"], p["ln_f.bias"]) @ p["wte.weight"].t()
    return out, auxes, zs, recs


def ce_loss(logits, targets):
    return llama.loss_fn(logits, targets)


def objective(logits, auxes, zs, targets):
    """The training objective: mean cross-entropy plus every layer's aux and z-loss."""
    return ce_loss(logits, targets) + sum(auxes) + sum(zs)


# ---- one evaluation, as the fixture script and its checks use it --------------------------
def routing_gap(recs, K):
    """Smallest distance between adjacent router logits among each token's top K+1."""
    gaps = []
    for r in recs:
        s = torch.sort(r["logits"], dim=-1, descending=True).values[..., : K + 1]
        gaps.append(float((s[..., :-1] - s[..., 1:]).min()))
    return min(gaps)


def same_routing(a, b):
    """Equal choices and kept flags in every layer."""
    return all(torch.equal(x["choices"], y["choices"]) and torch.equal(x["kept"], y["kept"])
               for x, y in zip(a, b))


def evaluate(p, idx, tgt, cfg, names, impl="sparse", mutate=None, grads=True):
    """Logits, CE, per-layer aux and z, routing records and (optionally) objective gradients."""
    q = {n: t.detach().clone().requires_grad_(grads) for n, t in p.items()}
    logits, auxes, zs, recs = forward(q, idx, cfg, impl, mutate)
    ce = ce_loss(logits, tgt)
    out = dict(logits=logits.detach(), ce=float(ce), aux=[float(a) for a in auxes],
               z=[float(z) for z in zs], recs=recs, gap=routing_gap(recs, cfg["top_k"]))
    if grads:
        obj = ce + sum(auxes) + sum(zs)
        gs = torch.autograd.grad(obj, [q[n] for n in names])
        out["grads"] = {n: g.detach() for n, g in zip(names, gs)}
        out["objective"] = float(obj)
    return out
