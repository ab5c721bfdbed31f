"""Llama as loom defines it, in float64 PyTorch: parameters, two independent forwards, HF names.

Used by make_llama_fixtures.py. Two formulations of the same model:

forward(p, idx, cfg)     loom names and [in, out] weights, batched tensor ops: RMSNorm, RoPE by
                         rotate_half with cos/sin tables, grouped-query attention by viewing the
                         NH query heads as (NKV, NH/NKV) groups, SwiGLU as g*sigmoid(g)*u.
hf_forward(sd, idx, cfg) Hugging Face LlamaForCausalLM names and [out, in] weights (F.linear),
                         one (batch row, head) at a time: RoPE as a complex rotation of the pairs
                         (x_i, x_{i+D/2}), query head h reading kv head repeat_interleave(...)[h],
                         an explicit causal softmax, F.silu, and its own log-sum-exp loss.
"""
import math

import numpy as np
import torch
import torch.nn.functional as F

F64 = torch.float64


def dims(cfg):
    C, NH, NKV = cfg["d_model"], cfg["n_head"], cfg["n_kv_head"]
    return C, NH, NKV, C // NH, cfg["ffn_hidden"], cfg["vocab_size"]


def param_specs(cfg):
    """(loom name, [in, out] shape, kind) in canonical order; kind selects the init."""
    C, NH, NKV, D, Fh, V = dims(cfg)
    specs = [("wte.weight", (V, C), "matrix")]
    for i in range(cfg["n_layer"]):
        h = "h.%d." % i
        specs += [
            (h + "ln_1.weight", (C,), "gain"),
            (h + "attn.c_attn.weight", (C, (NH + 2 * NKV) * D), "matrix"),  # q | k | v
            (h + "attn.c_proj.weight", (NH * D, C), "matrix"),
            (h + "ln_2.weight", (C,), "gain"),
            (h + "mlp.c_fc.weight", (C, 2 * Fh), "matrix"),  # gate | up
            (h + "mlp.c_proj.weight", (Fh, C), "matrix"),
        ]
    specs += [("ln_f.weight", (C,), "gain"), ("lm_head.weight", (V, C), "matrix")]
    return specs


# ---- first formulation: loom names, batched ---------------------------------------------------
def rmsnorm(x, w, eps):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w


def rotate_half(x):
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def rope_tables(T, D, theta, mutate=None):
    """cos, sin (T, D): angle t * theta^(-2i/D) for dims i and i + D/2."""
    inv = theta ** (-torch.arange(0, D, 2, dtype=F64) / D)  # (D/2)
    ang = torch.arange(T, dtype=F64)[:, None] * inv[None, :]  # (T, D/2)
    if mutate == "interleaved":  # GPT-J pairing (2i, 2i+1): a wrong-layout probe
        emb = ang.repeat_interleave(2, dim=-1)
    else:
        emb = torch.cat((ang, ang), dim=-1)
    return emb.cos(), emb.sin()


def rotate_pairs(x):  # GPT-J pairing, only for the wrong-layout probe
    x2 = x.reshape(*x.shape[:-1], -1, 2)
    return torch.stack((-x2[..., 1], x2[..., 0]), dim=-1).reshape(x.shape)


def attention(a, p, h, cfg, mutate=None):
    B, T, _ = a.shape
    C, NH, NKV, D, _, _ = dims(cfg)
    G = NH // NKV
    qkv = a @ p[h + "attn.c_attn.weight"]  # (B, T, (NH + 2 NKV) D)
    q = qkv[..., : NH * D].reshape(B, T, NH, D).transpose(1, 2)  # (B, NH, T, D)
    k = qkv[..., NH * D: (NH + NKV) * D].reshape(B, T, NKV, D).transpose(1, 2)  # (B, NKV, T, D)
    v = qkv[..., (NH + NKV) * D:].reshape(B, T, NKV, D).transpose(1, 2)
    theta = 10000.0 if mutate == "theta_1e4" else cfg["rope_theta"]
    if mutate != "no_rope":
        cos, sin = rope_tables(T, D, theta, mutate)
        rot = rotate_pairs if mutate == "interleaved" else rotate_half
        q = q * cos + rot(q) * sin
        k = k * cos + rot(k) * sin
    if mutate == "kv_modulo":  # query head h reading kv head h % NKV: a wrong-mapping probe
        k = k.repeat(1, G, 1, 1).reshape(B, NKV, G, T, D)  # head r of the repeat is r % NKV
        v = v.repeat(1, G, 1, 1).reshape(B, NKV, G, T, D)
    else:  # (B, NKV, G, T, D): query head h = j*G + g reads kv head j = h // G
        k = k[:, :, None].expand(B, NKV, G, T, D)
        v = v[:, :, None].expand(B, NKV, G, T, D)
    q = q.reshape(B, NKV, G, T, D)
    s = (q @ k.transpose(-1, -2)) / math.sqrt(D)  # (B, NKV, G, T, T)
    causal = torch.ones(T, T, dtype=torch.bool).tril()
    s = torch.softmax(s.masked_fill(~causal, float("-inf")), dim=-1)
    y = (s @ v).reshape(B, NH, T, D).transpose(1, 2).reshape(B, T, NH * D)
    return y @ p[h + "attn.c_proj.weight"]


def mlp(a, p, h, cfg):
    Fh = cfg["ffn_hidden"]
    gu = a @ p[h + "mlp.c_fc.weight"]  # (B, T, 2F) = [gate | up]
    g, u = gu[..., :Fh], gu[..., Fh:]
    return (g * torch.sigmoid(g) * u) @ p[h + "mlp.c_proj.weight"]


def forward(p, idx, cfg, mutate=None):
    """Logits (B, T, V)."""
    eps = cfg["norm_eps"]
    x = p["wte.weight"][idx]  # (B, T, C)
    for i in range(cfg["n_layer"]):
        h = "h.%d." % i
        x = x + attention(rmsnorm(x, p[h + "ln_1.weight"], eps), p, h, cfg, mutate)
        x = x + mlp(rmsnorm(x, p[h + "ln_2.weight"], eps), p, h, cfg)
    return rmsnorm(x, p["ln_f.weight"], eps) @ p["lm_head.weight"].t()


def loss_fn(logits, targets):
    V = logits.shape[-1]
    return F.cross_entropy(logits.reshape(-1, V), targets.reshape(-1), reduction="mean")


# ---- Hugging Face names ------------------------------------------------------------------------
def to_hf(w, cfg):
    """loom [in, out] float32 arrays -> HF LlamaForCausalLM state dict ([out, in]), float32."""
    C, NH, NKV, D, Fh, V = dims(cfg)
    t = lambda a: np.ascontiguousarray(a.T, dtype=np.float32)  # noqa: E731
    sd = {"model.embed_tokens.weight": np.ascontiguousarray(w["wte.weight"])}
    for i in range(cfg["n_layer"]):
        h, m = "h.%d." % i, "model.layers.%d." % i
        qkv = w[h + "attn.c_attn.weight"]
        sd[m + "self_attn.q_proj.weight"] = t(qkv[:, : NH * D])  # (NH D, C)
        sd[m + "self_attn.k_proj.weight"] = t(qkv[:, NH * D: (NH + NKV) * D])  # (NKV D, C)
        sd[m + "self_attn.v_proj.weight"] = t(qkv[:, (NH + NKV) * D:])
        sd[m + "self_attn.o_proj.weight"] = t(w[h + "attn.c_proj.weight"])  # (C, NH D)
        sd[m + "mlp.gate_proj.weight"] = t(w[h + "mlp.c_fc.weight"][:, :Fh])  # (F, C)
        sd[m + "mlp.up_proj.weight"] = t(w[h + "mlp.c_fc.weight"][:, Fh:])
        sd[m + "mlp.down_proj.weight"] = t(w[h + "mlp.c_proj.weight"])  # (C, F)
        sd[m + "input_layernorm.weight"] = np.ascontiguousarray(w[h + "ln_1.weight"])
        sd[m + "post_attention_layernorm.weight"] = np.ascontiguousarray(w[h + "ln_2.weight"])
    sd["model.norm.weight"] = np.ascontiguousarray(w["ln_f.weight"])
    sd["lm_head.weight"] = np.ascontiguousarray(w["lm_head.weight"])
    return sd


def hf_config(cfg):
    C, NH, NKV, D, Fh, V = dims(cfg)
    return {
        "architectures": ["LlamaForCausalLM"],
        "attention_bias": False,
        "attention_dropout": 0.0,
        "bos_token_id": 1,
        "eos_token_id": 2,
        "head_dim": D,
        "hidden_act": "silu",
        "hidden_size": C,
        "initializer_range": 0.02,
        "intermediate_size": Fh,
        "max_position_embeddings": cfg["max_positions"],
        "mlp_bias": False,
        "model_type": "llama",
        "num_attention_heads": NH,
        "num_hidden_layers": cfg["n_layer"],
        "num_key_value_heads": NKV,
        "pretraining_tp": 1,
        "rms_norm_eps": cfg["norm_eps"],
        "rope_scaling": None,
        "rope_theta": cfg["rope_theta"],
        "tie_word_embeddings": False,
        "torch_dtype": "float32",
        "use_cache": True,
        "vocab_size": V,
    }


# ---- second formulation: HF names, one head at a time ------------------------------------------
def rope_complex(x, theta):
    """x (T, D) of one head: pairs (x_i, x_{i+D/2}) as complex numbers times e^{i t theta^(-2i/D)}."""
    T, D = x.shape
    half = D // 2
    z = torch.complex(x[:, :half], x[:, half:])
    t = torch.arange(T, dtype=F64)[:, None]
    i = torch.arange(half, dtype=F64)[None, :]
    r = z * torch.polar(torch.ones(T, half, dtype=F64), t * theta ** (-2.0 * i / D))
    return torch.cat((r.real, r.imag), dim=-1)


def hf_forward(sd, idx, cfg):
    C, NH, NKV, D, Fh, V = dims(cfg)
    B, T = idx.shape
    eps, theta = cfg["norm_eps"], cfg["rope_theta"]

    def norm(x, w):
        ms = (x * x).sum(-1, keepdim=True) / x.shape[-1]
        return x / torch.sqrt(ms + eps) * w

    kv_of = torch.arange(NKV).repeat_interleave(NH // NKV)  # kv head of each query head
    x = F.embedding(idx, sd["model.embed_tokens.weight"])
    for i in range(cfg["n_layer"]):
        m = "model.layers.%d." % i
        a = norm(x, sd[m + "input_layernorm.weight"])
        q = F.linear(a, sd[m + "self_attn.q_proj.weight"])
        k = F.linear(a, sd[m + "self_attn.k_proj.weight"])
        v = F.linear(a, sd[m + "self_attn.v_proj.weight"])
        rows = []
        for b in range(B):
            heads = []
            for hq in range(NH):
                j = int(kv_of[hq])
                qh = rope_complex(q[b, :, hq * D: (hq + 1) * D], theta)  # (T, D)
                kh = rope_complex(k[b, :, j * D: (j + 1) * D], theta)
                vh = v[b, :, j * D: (j + 1) * D]
                out = []
                for t in range(T):
                    sc = (kh[: t + 1] @ qh[t]) / math.sqrt(D)  # positions 0..t
                    e = torch.exp(sc - sc.max())
                    out.append((e / e.sum()) @ vh[: t + 1])
                heads.append(torch.stack(out))  # (T, D)
            rows.append(torch.cat(heads, dim=-1))  # (T, NH D)
        x = x + F.linear(torch.stack(rows), sd[m + "self_attn.o_proj.weight"])
        a = norm(x, sd[m + "post_attention_layernorm.weight"])
        g = F.linear(a, sd[m + "mlp.gate_proj.weight"])
        u = F.linear(a, sd[m + "mlp.up_proj.weight"])
        x = x + F.linear(F.silu(g) * u, sd[m + "mlp.down_proj.weight"])
    return F.linear(norm(x, sd["model.norm.weight"]), sd["lm_head.weight"])


def hf_loss(logits, targets):
    z = logits.reshape(-1, logits.shape[-1])
    mx = z.max(dim=-1, keepdim=True).values
    lse = mx.squeeze(-1) + torch.log(torch.exp(z - mx).sum(-1))
    return (lse - z.gather(1, targets.reshape(-1, 1)).squeeze(-1)).mean()
