#!/usr/bin/python3
# Writes Hugging Face-style safetensors fixtures of the tiny GPT-2 from gpt2_tiny_weights.h5 (numpy + h5py only).
"""
The safetensors format (as published by Hugging Face), written here with our own code:
  8 bytes   little-endian u64 N, the length of the JSON header
  N bytes   UTF-8 JSON object: name -> {"dtype", "shape", "data_offsets": [begin, end]},
            plus an optional "__metadata__" object of strings; padded with spaces
  the rest  the data section; offsets are relative to its start; little-endian, C order

Outputs (in --out-dir, default tests/reference/fixtures):

gpt2_tiny_hf_mixed.safetensors
    Looks like a GPT2LMHeadModel state dict: every canonical tensor under the "transformer."
    prefix, mixed dtypes (BF16, F16, F64 and F32, see DTYPES), the causal-mask buffers
    "transformer.h.{i}.attn.bias" (F32 [1,1,P,P]) and "transformer.h.{i}.attn.masked_bias"
    (F32 scalar), an "lm_head.weight" (F32, equal to wte as in a tied model's state dict), and
    __metadata__ {"format": "pt"}. The JSON keys and the data are in state-dict order, not
    sorted, so a reader cannot rely on either order.

gpt2_tiny_hf_rounded.safetensors
    The fp32 values a correct reader must produce from the mixed file: the canonical names (no
    prefix, no extras), all F32, each value the exact fp32 of its BF16/F16 rounding (numpy's
    float16 conversion; BF16 by round-to-nearest-even on the top 16 bits), and the original
    values for F32/F64 tensors.

Run: /usr/bin/python3 tests/reference/make_safetensors_fixture.py
The output is deterministic (sha256s are printed).
"""
import argparse
import hashlib
import json
import os
import struct

import h5py
import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))

# dtype per canonical name suffix (layer-independent); everything else is F32.
DTYPES = {
    "wte.weight": "BF16",
    "attn.c_attn.weight": "F16",
    "attn.c_attn.bias": "BF16",
    "attn.c_proj.bias": "F16",
    "ln_2.weight": "F64",
    "mlp.c_fc.weight": "BF16",
    "mlp.c_proj.weight": "F16",
}


def dtype_for(name):
    for suffix, dt in DTYPES.items():
        if name == suffix or name.endswith("." + suffix):
            return dt
    return "F32"


def to_bf16_bits(x32):
    """Round float32 to bfloat16 (nearest, ties to even); returns uint16 bits. No NaNs here."""
    b = np.ascontiguousarray(x32, dtype="<f4").view("<u4").astype(np.uint64)
    lsb = (b >> 16) & 1
    return ((b + 0x7FFF + lsb) >> 16).astype("<u2")


def encode(x32, dt):
    """(bytes as stored, fp32 value a reader must produce)."""
    if dt == "F32":
        a = np.ascontiguousarray(x32, dtype="<f4")
        return a.tobytes(), a.copy()
    if dt == "F64":
        a = np.ascontiguousarray(x32, dtype="<f8")
        return a.tobytes(), a.astype(np.float32)
    if dt == "F16":
        a = np.ascontiguousarray(x32.astype("<f2"))
        return a.tobytes(), a.astype(np.float32)
    if dt == "BF16":
        bits = to_bf16_bits(x32)
        back = (bits.astype("<u4") << 16).view("<f4").astype(np.float32)
        return bits.tobytes(), back
    raise ValueError(dt)


def write_safetensors(path, entries, metadata):
    """entries: list of (name, dtype, shape, raw bytes) in file order."""
    header = {}
    if metadata:
        header["__metadata__"] = metadata
    off = 0
    for name, dt, shape, raw in entries:
        header[name] = {"dtype": dt, "shape": list(shape), "data_offsets": [off, off + len(raw)]}
        off += len(raw)
    text = json.dumps(header, separators=(",", ":")).encode("utf-8")
    text += b" " * ((-len(text)) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for _, _, _, raw in entries:
            f.write(raw)


NP = {"F32": "<f4", "F64": "<f8", "F16": "<f2"}


def read_safetensors(path):
    """Independent re-read: name -> (dtype, fp32 array)."""
    with open(path, "rb") as f:
        blob = f.read()
    (n,) = struct.unpack("<Q", blob[:8])
    header = json.loads(blob[8 : 8 + n].decode("utf-8"))
    data = blob[8 + n :]
    out = {}
    spans = []
    for name, info in header.items():
        if name == "__metadata__":
            continue
        b, e = info["data_offsets"]
        spans.append((b, e))
        raw = data[b:e]
        if info["dtype"] == "BF16":
            v = (np.frombuffer(raw, "<u2").astype("<u4") << 16).view("<f4")
        else:
            v = np.frombuffer(raw, NP[info["dtype"]]).astype(np.float32)
        out[name] = (info["dtype"], v.reshape(info["shape"]))
    spans.sort()
    assert spans[0][0] == 0 and spans[-1][1] == len(data), "data section not fully covered"
    assert all(a[1] == b[0] for a, b in zip(spans, spans[1:])), "holes or overlaps"
    assert (8 + n) % 8 == 0
    return header, out


def canonical_order(names, n_layer):
    per_layer = ["ln_1.weight", "ln_1.bias", "attn.c_attn.weight", "attn.c_attn.bias",
                 "attn.c_proj.weight", "attn.c_proj.bias", "ln_2.weight", "ln_2.bias",
                 "mlp.c_fc.weight", "mlp.c_fc.bias", "mlp.c_proj.weight", "mlp.c_proj.bias"]
    order = ["wte.weight", "wpe.weight"]
    for i in range(n_layer):
        order += [f"h.{i}.{s}" for s in per_layer]
    order += ["ln_f.weight", "ln_f.bias"]
    assert sorted(order) == sorted(names), "unexpected tensors in the weights file"
    return order


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--weights", default=os.path.join(HERE, "fixtures", "gpt2_tiny_weights.h5"))
    ap.add_argument("--out-dir", default=os.path.join(HERE, "fixtures"))
    args = ap.parse_args()

    with h5py.File(args.weights, "r") as f:
        w = {k: np.asarray(f[k], dtype=np.float32) for k in f.keys()}
    n_layer = 1 + max(int(k.split(".")[1]) for k in w if k.startswith("h."))
    P = w["wpe.weight"].shape[0]
    order = canonical_order(list(w), n_layer)

    mixed, rounded = [], {}
    for name in order:
        dt = dtype_for(name)
        raw, back = encode(w[name], dt)
        rounded[name] = back
        mixed.append(("transformer." + name, dt, w[name].shape, raw))
        if name.endswith("attn.c_proj.bias"):  # HF keeps the buffers after each layer's attn
            i = name.split(".")[1]
            mask = np.tril(np.ones((P, P), "<f4")).reshape(1, 1, P, P)
            mixed.append((f"transformer.h.{i}.attn.bias", "F32", mask.shape, mask.tobytes()))
            mixed.append((f"transformer.h.{i}.attn.masked_bias", "F32", (),
                          np.array(-1e4, "<f4").tobytes()))
    mixed.append(("lm_head.weight", "F32", w["wte.weight"].shape,
                  np.ascontiguousarray(w["wte.weight"], "<f4").tobytes()))

    os.makedirs(args.out_dir, exist_ok=True)
    p_mixed = os.path.join(args.out_dir, "gpt2_tiny_hf_mixed.safetensors")
    p_round = os.path.join(args.out_dir, "gpt2_tiny_hf_rounded.safetensors")
    write_safetensors(p_mixed, mixed, {"format": "pt"})
    write_safetensors(p_round, [(n, "F32", rounded[n].shape, rounded[n].astype("<f4").tobytes())
                                for n in sorted(rounded)], {})

    # Self-checks: re-read both files and compare with the weights.
    hdr, got = read_safetensors(p_mixed)
    assert hdr["__metadata__"] == {"format": "pt"}
    _, exp = read_safetensors(p_round)
    tol = {"F32": (0, 0), "F64": (0, 0), "F16": (2.0**-11, 2.0**-25), "BF16": (2.0**-8, 0)}
    counts = {}
    for name in order:
        dt, v = got["transformer." + name]
        assert dt == dtype_for(name)
        counts[dt] = counts.get(dt, 0) + 1
        assert np.array_equal(v, exp[name][1]), name
        rel, ab = tol[dt]
        err = np.abs(v.astype(np.float64) - w[name].astype(np.float64))
        assert np.all(err <= rel * np.abs(w[name].astype(np.float64)) + ab), (name, err.max())
        if dt in ("F32", "F64"):
            assert np.array_equal(v, w[name]), name
        else:
            assert not np.array_equal(v, w[name]), f"{name}: rounding changed nothing"
    assert np.array_equal(got["lm_head.weight"][1], w["wte.weight"])
    assert got["transformer.h.0.attn.bias"][1].shape == (1, 1, P, P)
    assert set(counts) == {"F32", "F64", "F16", "BF16"}, counts

    for p in (p_mixed, p_round):
        with open(p, "rb") as f:
            blob = f.read()
        print(f"{hashlib.sha256(blob).hexdigest()}  {os.path.basename(p)}  ({len(blob):,} bytes)")
    print("tensors per dtype in the mixed file:", dict(sorted(counts.items())))


if __name__ == "__main__":
    main()
