#!/usr/bin/env python3
# Writes a random-token Megatron MMIDIDX dataset (PREFIX.bin/.idx) for benchmarks without a tokenizer.
"""Random uint16 tokens as an MMIDIDX dataset (format: src/data/indexed_dataset.h), and on request
the same tokens as one llm.c training shard, so that loom and llm.c train on the same stream in
scripts/gpu_lease.sh. Standard library only, so it runs on any python3."""
import argparse
import array
import os
import random
import struct
import sys


def main():
    ap = argparse.ArgumentParser(description="random-token MMIDIDX dataset (uint16 tokens)")
    ap.add_argument("--output-prefix", required=True, help="writes PREFIX.bin and PREFIX.idx")
    ap.add_argument("--tokens", type=int, default=1 << 20, help="total tokens (default 1Mi)")
    ap.add_argument("--docs", type=int, default=16, help="documents (default 16)")
    ap.add_argument("--vocab", type=int, default=50257, help="ids are drawn from [0, vocab)")
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--llmc-shard", metavar="FILE",
                    help="also write the tokens as an llm.c shard: 256 int32 header words "
                    "(magic 20240520, version 1, token count, zeros), then the uint16 tokens")
    a = ap.parse_args()
    if not (0 < a.vocab < 65500) or a.docs < 1 or a.tokens < a.docs:
        sys.exit("make_random_dataset: need 0 < vocab < 65500 (uint16) and tokens >= docs >= 1")
    if sys.byteorder != "little":
        sys.exit("make_random_dataset: MMIDIDX files are little-endian; run on a little-endian host")
    rng = random.Random(a.seed)
    toks = array.array("H", (rng.randrange(a.vocab) for _ in range(a.tokens)))  # (tokens,)
    per = a.tokens // a.docs
    sizes = [per] * a.docs                                # (docs,) one sequence per document
    sizes[-1] += a.tokens - per * a.docs
    pointers, off = [], 0                                 # (docs,) byte offsets into .bin
    for s in sizes:
        pointers.append(off)
        off += 2 * s
    d = os.path.dirname(os.path.abspath(a.output_prefix))
    os.makedirs(d, exist_ok=True)
    with open(a.output_prefix + ".bin.tmp", "wb") as f:
        toks.tofile(f)
    with open(a.output_prefix + ".idx.tmp", "wb") as f:
        f.write(b"MMIDIDX\x00\x00")
        f.write(struct.pack("<QBQQ", 1, 8, a.docs, a.docs + 1))  # version, uint16, S, D+1
        f.write(struct.pack(f"<{a.docs}i", *sizes))
        f.write(struct.pack(f"<{a.docs}q", *pointers))
        f.write(struct.pack(f"<{a.docs + 1}q", *range(a.docs + 1)))  # document index
    os.replace(a.output_prefix + ".bin.tmp", a.output_prefix + ".bin")
    os.replace(a.output_prefix + ".idx.tmp", a.output_prefix + ".idx")
    print(f"wrote {a.output_prefix}.bin/.idx: {a.tokens} tokens in {a.docs} documents")
    if a.llmc_shard:
        if a.tokens >= 2**31:
            sys.exit("make_random_dataset: an llm.c shard counts its tokens in an int32")
        header = array.array("i", [0] * 256)  # (256,) int32
        header[0], header[1], header[2] = 20240520, 1, a.tokens
        with open(a.llmc_shard + ".tmp", "wb") as f:
            header.tofile(f)
            toks.tofile(f)
        os.replace(a.llmc_shard + ".tmp", a.llmc_shard)
        print(f"wrote {a.llmc_shard}: the same tokens as an llm.c shard")


if __name__ == "__main__":
    main()
