#!/usr/bin/env python3
"""Checks the pictures scripts/draw_design.py wrote, against the tree, independently of it.

Usage: verify_design_svg.py REPO DIR   (DIR holds layers.svg and step.svg; exit 1 and one line
per fault)

- both files parse as XML (xml.etree) and are <svg> documents;
- layers.svg names every layer folder of scripts/check_layers.py's LAYERS (as its path from the
  repository root) in a box label, drawn in that order from the bottom up;
- its arcs carry, per pair of folders, the number of #include lines that this file counts
  itself from the sources (its own reading of the include syntax, not the drawing script's);
- step.svg shows the stages of a step top to bottom in the order of a training step.
"""
import collections
import importlib.util
import os
import re
import sys
import xml.etree.ElementTree as ET

SVG = "{http://www.w3.org/2000/svg}"
EXTS = (".h", ".cpp", ".cu", ".cuh")
# Titles of step.svg's boxes that must appear, top to bottom, in this order.
STEP_ORDER = ["Trainer::run_step", "DataLoader::train_batch", "PipelineExecutor::run",
              "GPTStage::forward", "GPTStage::backward", "ZeroOptimizer::reduce_grads_and_norm",
              "ZeroOptimizer::step", "Trainer::step_stats"]


def declared_layers(repo):
    path = os.path.join(repo, "scripts", "check_layers.py")
    spec = importlib.util.spec_from_file_location("check_layers", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return list(mod.LAYERS), mod.SRC_LAYERS


def counted_includes(repo, layers, src_layers):
    """#include lines per (including folder, included folder), read here from the sources."""
    inc = re.compile(r'^[ \t]*#[ \t]*include[ \t]*"([A-Za-z0-9_]+)/', re.M)
    counts = collections.Counter()
    for name in layers:
        top = os.path.join(repo, "src", name) if name in src_layers else os.path.join(repo, name)
        for root, _, names in os.walk(top):
            for fname in names:
                if fname.endswith(EXTS):
                    with open(os.path.join(root, fname), encoding="utf-8") as f:
                        for first in inc.findall(f.read()):
                            if first in layers and first != name:
                                counts[(name, first)] += 1
    return counts


def parse(path, faults):
    try:
        root = ET.parse(path).getroot()
    except (ET.ParseError, OSError) as e:
        faults.append(f"{path}: not well-formed SVG: {e}")
        return None
    if root.tag != SVG + "svg":
        faults.append(f"{path}: the root element is {root.tag}, not svg")
        return None
    return root


def check_layers(repo, root, path, faults):
    layers, src_layers = declared_layers(repo)
    ys = {}
    for t in root.iter(SVG + "text"):
        if t.get("class") == "layer":
            ys[t.text] = float(t.get("y"))
    labels = [f"src/{n}" if n in src_layers else n for n in layers]
    for label in labels:
        if label not in ys:
            faults.append(f"{path}: no box for the layer folder '{label}'")
    drawn = [ys[label] for label in labels if label in ys]
    if drawn != sorted(drawn, reverse=True):
        faults.append(f"{path}: the layer boxes are not drawn bottom-up in the declared order")
    got = {}
    title = re.compile(r"^(\w+) includes (\w+): (\d+) #include lines?\b")
    for p in root.iter(SVG + "path"):
        t = p.find(SVG + "title")
        m = title.match(t.text) if t is not None and t.text else None
        if m:
            got[(m.group(1), m.group(2))] = int(m.group(3))
    want = counted_includes(repo, layers, src_layers)
    for pair in sorted(set(want) | set(got)):
        if want.get(pair, 0) != got.get(pair, 0):
            faults.append(f"{path}: {pair[0]} includes {pair[1]}: the tree has "
                          f"{want.get(pair, 0)} #include lines, the picture {got.get(pair, 0)}")


def check_step(root, path, faults):
    ys = {}
    for t in root.iter(SVG + "text"):
        if t.get("class") == "step" and t.text:
            for key in STEP_ORDER:
                if key in t.text and key not in ys:
                    ys[key] = float(t.get("y"))
    missing = [k for k in STEP_ORDER if k not in ys]
    for k in missing:
        faults.append(f"{path}: no box for '{k}'")
    if not missing and [ys[k] for k in STEP_ORDER] != sorted(ys.values()):
        faults.append(f"{path}: the boxes are not in the order of a training step")


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    repo, out = sys.argv[1], sys.argv[2]
    faults = []
    layers_svg, step_svg = os.path.join(out, "layers.svg"), os.path.join(out, "step.svg")
    root = parse(layers_svg, faults)
    if root is not None:
        check_layers(repo, root, layers_svg, faults)
    root = parse(step_svg, faults)
    if root is not None:
        check_step(root, step_svg, faults)
    for f in faults:
        print(f)
    print(f"verify_design_svg: {len(faults)} fault(s)")
    return 1 if faults else 0


if __name__ == "__main__":
    sys.dont_write_bytecode = True
    sys.exit(main())
