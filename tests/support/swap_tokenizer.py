#!/usr/bin/env python3
"""Rewrites the tokenizer of a loom checkpoint's stored config (every step's meta.json) to the
GPT-2 tokenizer in GPT2_DIR, leaving the model as it is: a checkpoint whose tokenizer does not
match its model, for the tests of what generate and serve answer to prompt ids the model lacks.

usage: swap_tokenizer.py CHECKPOINT_DIR GPT2_DIR
"""
import glob
import json
import os
import sys

ckpt, gpt2 = sys.argv[1], os.path.abspath(sys.argv[2])
metas = glob.glob(os.path.join(ckpt, "step_*", "meta.json"))
if not metas:
    sys.exit(f"swap_tokenizer: no step_*/meta.json under {ckpt}")
for path in metas:
    with open(path) as f:
        meta = json.load(f)
    lines = meta["config"].split("\n")
    start = lines.index("tokenizer:")
    if lines[start + 1] != "  type: bytes":
        sys.exit(f"swap_tokenizer: {path}: the stored tokenizer is not 'bytes'")
    lines[start + 1 : start + 4] = [
        "  type: gpt2",
        f"  vocab: {gpt2}/encoder.json",
        f"  merges: {gpt2}/vocab.bpe",
    ]
    meta["config"] = "\n".join(lines)
    with open(path, "w") as f:
        json.dump(meta, f)
