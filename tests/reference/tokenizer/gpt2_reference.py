#!/usr/bin/python3
# GPT-2 tokenization as OpenAI's encoder.py defines it (Python `regex` pattern, byte-level BPE
# merging every occurrence of the lowest-ranked pair), used to cross-check the fixture.
# Usage: gpt2_reference.py ENCODER_JSON VOCAB_BPE < [{"hex": "..."}...] > [[ids]...]
# Invalid UTF-8 is decoded with 'surrogateescape': each invalid byte becomes a lone surrogate,
# which the pattern classes as [^\s\p{L}\p{N}], and is encoded back to the same byte.
import json
import sys

import regex  # Debian: python3-regex

PATTERN = regex.compile(r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+""")


def byte_alphabet():
    keep = list(range(0x21, 0x7F)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    table, extra = {}, 256
    for b in range(256):
        if b in keep:
            table[b] = chr(b)
        else:
            table[b] = chr(extra)
            extra += 1
    return table


def load(encoder_path, bpe_path):
    with open(encoder_path, encoding="utf-8") as f:
        encoder = json.load(f)
    with open(bpe_path, encoding="utf-8") as f:
        lines = f.read().split("\n")
    merges = [tuple(line.split()) for line in lines[1:] if line.strip()]
    return encoder, {pair: rank for rank, pair in enumerate(merges)}


def bpe(word, ranks):
    parts = list(word)
    while len(parts) > 1:
        candidates = [(ranks.get((parts[i], parts[i + 1]), None), i) for i in range(len(parts) - 1)]
        candidates = [c for c in candidates if c[0] is not None]
        if not candidates:
            break
        _, i = min(candidates)
        first, second = parts[i], parts[i + 1]
        merged, k = [], 0
        while k < len(parts):  # every occurrence, left to right, without overlap
            if k + 1 < len(parts) and parts[k] == first and parts[k + 1] == second:
                merged.append(first + second)
                k += 2
            else:
                merged.append(parts[k])
                k += 1
        parts = merged
    return parts


def encode(data, encoder, ranks, alphabet):
    text = data.decode("utf-8", "surrogateescape")
    ids = []
    for piece in PATTERN.findall(text):
        raw = piece.encode("utf-8", "surrogateescape")
        word = "".join(alphabet[b] for b in raw)
        ids.extend(encoder[token] for token in bpe(word, ranks))
    return ids


def main():
    encoder, ranks = load(sys.argv[1], sys.argv[2])
    alphabet = byte_alphabet()
    cases = json.load(sys.stdin)
    json.dump([encode(bytes.fromhex(c["hex"]), encoder, ranks, alphabet) for c in cases], sys.stdout)


if __name__ == "__main__":
    main()
