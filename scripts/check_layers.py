#!/usr/bin/env python3
"""Checks that every #include in src/, kernels/ and data_tools/ looks down the declared layers.

The layers, lowest first (docs/design.md draws them). A file may include files of its own
layer and of layers below it, never above, and always by its path from the repository root
("model/block.h" under src/, "kernels/matmul.h", "data_tools/tokenizer.h"), so that a reader and
this check resolve an include the same way.

Usage: scripts/check_layers.py [REPO]  (exit 1 and one line per fault when an include points up)
"""
import os
import re
import sys

# Lowest first. Each entry is a folder of the repository (src/<name> for the names of src/).
LAYERS = [
    "kernels",     # the cpu and cuda twins of every op: no loom dependency at all
    "core",        # errors, logging, dtypes, buffers, rng, timers
    "config",      # the YAML experiment description and its validation
    "backend",     # cpu and cuda devices: memory and the kernels of a step
    "parallel",    # grid, communicators (MPI, NCCL), topology, watchdog
    "layout",      # where things go: parameter layout, block buffers, schedules, ZeRO shards
    "model",       # transformer blocks, a pipeline stage, init, FLOPs
    "data",        # .bin/.idx datasets, blending, shuffling, the loader
    "optim",       # ZeRO AdamW, learning-rate schedule, loss scaling
    "pipeline",    # the executor of a schedule
    "ckpt",        # checkpoints, canonical weights, safetensors
    "plan",        # loom plan: search of layouts against a cluster
    "train",       # the trainer, console, metrics, generation
    "data_tools",  # tokenizers and the preprocessing tool
    "serve",       # loom serve: the completions API, request board, tick loop, HTTP front end
    "cli",         # the loom command line
]
SRC_LAYERS = {"core", "config", "backend", "parallel", "model", "layout", "data", "optim",
              "pipeline", "ckpt", "plan", "train", "serve", "cli"}
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"')
EXTS = (".h", ".cpp", ".cu", ".cuh")


def layer_dir(repo, name):
    return os.path.join(repo, "src", name) if name in SRC_LAYERS else os.path.join(repo, name)


def layer_of_include(path):
    """The layer an include names, or None for a file outside the layers (system headers)."""
    first = path.split("/")[0]
    return first if first in LAYERS and "/" in path else None


def main():
    repo = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else
                           os.path.join(os.path.dirname(__file__), ".."))
    rank = {name: i for i, name in enumerate(LAYERS)}
    faults = []
    files = 0
    for name in LAYERS:
        top = layer_dir(repo, name)
        if not os.path.isdir(top):
            faults.append(f"{os.path.relpath(top, repo)}: declared layer folder is missing")
            continue
        for root, _, names in os.walk(top):
            for fname in sorted(names):
                if not fname.endswith(EXTS):
                    continue
                path = os.path.join(root, fname)
                rel = os.path.relpath(path, repo)
                files += 1
                with open(path, encoding="utf-8") as f:
                    for lineno, line in enumerate(f, 1):
                        m = INCLUDE.match(line)
                        if not m:
                            continue
                        inc = m.group(1)
                        target = layer_of_include(inc)
                        if target is None:
                            if "/" not in inc:
                                faults.append(f"{rel}:{lineno}: #include \"{inc}\" by a bare name: "
                                              "write its path from the repository root")
                            continue
                        if rank[target] > rank[name]:
                            faults.append(f"{rel}:{lineno}: #include \"{inc}\" points up: layer "
                                          f"'{name}' may not use '{target}' (order: "
                                          f"{' < '.join(LAYERS)})")
    for f in faults:
        print(f)
    print(f"check_layers: {files} files, {len(faults)} fault(s)")
    return 1 if faults else 0


if __name__ == "__main__":
    sys.exit(main())
