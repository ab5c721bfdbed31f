#!/usr/bin/env python3
"""Draws the two pictures of docs/design.md as SVG text (Python standard library only).

layers.svg  one box per layer folder in the order scripts/check_layers.py declares (read from
            that file), and the #include lines between folders, counted from the tree the way
            the layer check reads them: arcs, and a table of the counts. An include that points
            up is drawn red.
step.svg    the data path of one training step on one rank. Every call the picture names is
            looked up in the file it cites, in the order drawn (scripts/design_step.py holds the
            picture's text and that order), so a renamed or reordered call stops this script
            instead of leaving the picture wrong.

Usage: scripts/draw_design.py [--repo DIR] [--out DIR] [--check]
  --repo DIR  the repository (default: this script's)
  --out DIR   where to write layers.svg and step.svg (default: REPO/docs/images)
  --check     write nothing; exit 1 naming each picture under REPO/docs/images that differs from
              what the tree gives now (then run this script without --check and commit them)
"""
import argparse
import collections
import importlib.util
import math
import os
import re
import sys
from xml.sax.saxutils import escape

sys.dont_write_bytecode = True  # no __pycache__ in scripts/
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from design_step import COMM, STEP, STEP_ORDER  # noqa: E402  (the step picture's content)

FONT = "DejaVu Sans, Helvetica, Arial, sans-serif"
MONO = "DejaVu Sans Mono, Menlo, Consolas, monospace"
# Colour of the including folder's arcs, by layer index (cycled).
PALETTE = ["#1f77b4", "#ff7f0e", "#2ca02c", "#9467bd", "#8c564b", "#e377c2", "#17becf",
           "#bcbd22", "#7f7f7f", "#d62728"]
UP = "#d62728"


def fail(msg):
    sys.exit(f"draw_design: {msg}")


def text_width(s, size, mono=False):
    """Estimated rendered width: DejaVu Sans runs ~0.5 em per character of this text (0.53
    leaves a margin), DejaVu Sans Mono 0.6."""
    return len(s) * size * (0.6 if mono else 0.53)


class Svg:
    def __init__(self, width, height, title):
        self.w, self.h, self.parts = width, height, []
        self.parts.append(f'<title>{escape(title)}</title>')
        self.parts.append(f'<rect x="0" y="0" width="{width}" height="{height}" fill="#ffffff"/>')

    def add(self, s):
        self.parts.append(s)

    def text(self, x, y, s, size=12, anchor="start", weight="normal", fill="#222222", mono=False,
             extra=""):
        fam = f' font-family="{MONO}"' if mono else ""
        bold = ' font-weight="bold"' if weight == "bold" else ""
        self.add(f'<text x="{x:.1f}" y="{y:.1f}" font-size="{size}" text-anchor="{anchor}"'
                 f'{bold} fill="{fill}"{fam}{extra}>{escape(s)}</text>')

    def rect(self, x, y, w, h, fill, stroke="none", rx=4, extra=""):
        self.add(f'<rect x="{x:.1f}" y="{y:.1f}" width="{w:.1f}" height="{h:.1f}" rx="{rx}" '
                 f'fill="{fill}" stroke="{stroke}"{extra}/>')

    def render(self):
        head = (f'<svg xmlns="http://www.w3.org/2000/svg" width="{self.w}" height="{self.h}" '
                f'viewBox="0 0 {self.w} {self.h}" font-family="{FONT}">')
        return "\n".join([head] + self.parts + ["</svg>", ""])


def arrow_marker(svg, name, colour):
    svg.add(f'<defs><marker id="{name}" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="8" '
            f'markerHeight="8" markerUnits="userSpaceOnUse" orient="auto-start-reverse">'
            f'<path d="M0,0 L10,5 L0,10 z" fill="{colour}"/></marker></defs>')


# ---- (a) the layers -----------------------------------------------------------------------

def load_layer_check(repo):
    path = os.path.join(repo, "scripts", "check_layers.py")
    if not os.path.isfile(path):
        fail(f"{path}: missing (the layer order is read from it)")
    spec = importlib.util.spec_from_file_location("check_layers", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    with open(path, encoding="utf-8") as f:  # each layer's comment in LAYERS is its role
        roles = dict(re.findall(r'^\s*"(\w+)",\s*#\s*(.+?)\s*$', f.read(), re.M))
    return mod, roles


def count_includes(repo, cl):
    """(files per layer, #include lines per (including layer, included layer))."""
    files, edges = collections.Counter(), collections.Counter()
    for name in cl.LAYERS:
        top = cl.layer_dir(repo, name)
        if not os.path.isdir(top):
            fail(f"{os.path.relpath(top, repo)}: declared layer folder is missing")
        for root, dirs, names in os.walk(top):
            dirs.sort()
            for fname in sorted(names):
                if not fname.endswith(cl.EXTS):
                    continue
                files[name] += 1
                with open(os.path.join(root, fname), encoding="utf-8") as f:
                    for line in f:
                        m = cl.INCLUDE.match(line)
                        target = cl.layer_of_include(m.group(1)) if m else None
                        if target is not None and target != name:
                            edges[(name, target)] += 1
    return files, edges


def draw_layers(repo):
    cl, roles = load_layer_check(repo)
    layers = list(cl.LAYERS)
    n, rank = len(layers), {name: i for i, name in enumerate(cl.LAYERS)}
    files, edges = count_includes(repo, cl)
    label = {name: os.path.relpath(cl.layer_dir(repo, name), repo) for name in layers}

    row_h, box_h, top = 34, 26, 118
    arc_x, box_w, cell = 250, 650, 26
    mat_x = arc_x + box_w + 24
    width = mat_x + n * cell + 24
    height = top + n * row_h + 70
    row_y = {name: top + (n - 1 - rank[name]) * row_h for name in layers}  # lowest at the bottom
    svg = Svg(width, height, "loom: layers and the #include lines between them")
    arrow_marker(svg, "down", "#555555")
    arrow_marker(svg, "up", UP)
    total = sum(edges.values())
    svg.text(20, 26, "loom's layers: a folder includes only its own and lower folders", 16,
             weight="bold")
    svg.text(20, 46, f"{sum(files.values())} source files; {total} #include lines between "
             f"folders ({len(edges)} pairs), counted from the tree by scripts/draw_design.py; "
             "the order is scripts/check_layers.py's", 11.5, fill="#444444")

    # Arcs on the left: from the including folder's box down to the included one's.
    outs, ins = collections.defaultdict(list), collections.defaultdict(list)
    for (a, b) in sorted(edges, key=lambda e: (rank[e[0]], rank[e[1]])):
        outs[a].append(b)
        ins[b].append(a)

    def port(name, others, lower_half):
        """y of each arc end on name's box: out-going in the upper half, in-coming in the lower."""
        y0 = row_y[name] + (box_h / 2 + 2 if lower_half else 3)
        span = box_h / 2 - 5
        step = span / max(1, len(others) - 1) if len(others) > 1 else 0
        return {o: y0 + (i * step if len(others) > 1 else span / 2) for i, o in enumerate(others)}

    out_y = {a: port(a, sorted(outs[a], key=lambda b: rank[b]), False) for a in outs}
    in_y = {b: port(b, sorted(ins[b], key=lambda a: -rank[a]), True) for b in ins}
    for (a, b), k in sorted(edges.items(), key=lambda e: -abs(rank[e[0][0]] - rank[e[0][1]])):
        y1, y2 = out_y[a][b], in_y[b][a]
        depth = 14 + abs(rank[a] - rank[b]) * (arc_x - 40) / (n - 1)
        up = rank[b] > rank[a]
        colour = UP if up else PALETTE[rank[a] % len(PALETTE)]
        what = "#include line" if k == 1 else "#include lines"
        note = " (points up: scripts/check_layers.py refuses it)" if up else ""
        dash = ' stroke-dasharray="5,3"' if up else ""
        svg.add(f'<path class="{"up" if up else "edge"}" d="M{arc_x:.1f},{y1:.1f} '
                f'C{arc_x - depth:.1f},{y1:.1f} {arc_x - depth:.1f},{y2:.1f} {arc_x:.1f},{y2:.1f}" '
                f'fill="none" stroke="{colour}" stroke-opacity="0.8" '
                f'stroke-width="{0.6 + 0.45 * math.sqrt(k):.2f}"{dash} '
                f'marker-end="url(#{"up" if up else "down"})"><title>{escape(a)} includes '
                f'{escape(b)}: {k} {what}{escape(note)}</title></path>')

    # One box per folder: path, role (check_layers.py's comment), file count.
    for name in layers:
        y = row_y[name]
        svg.rect(arc_x, y, box_w, box_h, "#f4f6fa", "#8a94a6")
        svg.text(arc_x + 8, y + 17.5, label[name], 12.5, weight="bold", extra=' class="layer"')
        role = roles.get(name, "")
        if text_width(role, 11) > box_w - 185:
            fail(f"the role of '{name}' in scripts/check_layers.py is too long for its box")
        svg.text(arc_x + 122, y + 17.5, role, 11, fill="#333333")
        svg.text(arc_x + box_w - 8, y + 17.5, f"{files[name]} files", 10.5, anchor="end",
                 fill="#666666")

    # The table: row includes column, number of #include lines.
    for j, name in enumerate(layers):
        cx = mat_x + j * cell + cell / 2
        svg.text(cx + 3, top - 6, name, 10.5, fill="#333333",
                 extra=f' transform="rotate(-60 {cx + 3:.1f} {top - 6:.1f})"')
    peak = max(edges.values()) if edges else 1
    for a in layers:
        y = row_y[a]
        for j, b in enumerate(layers):
            x = mat_x + j * cell
            k = edges.get((a, b), 0)
            if a == b:
                fill = "#d9d9d9"
            elif k and rank[b] > rank[a]:
                fill = UP
            elif k:
                shade = 0.25 + 0.75 * math.sqrt(k / peak)
                fill = "#%02x%02x%02x" % (int(255 - 200 * shade), int(255 - 130 * shade), 255)
            else:
                fill = "#ffffff" if rank[b] < rank[a] else "#f7f7f7"
            svg.rect(x, y, cell - 2, box_h, fill, "#e0e0e0", rx=2)
            if k:
                dark = rank[b] > rank[a] or math.sqrt(k / peak) > 0.55
                svg.text(x + (cell - 2) / 2, y + 17, str(k), 10.5, anchor="middle",
                         fill="#ffffff" if dark else "#1a1a1a")
    foot = top + n * row_h + 14
    svg.text(20, foot, "Arcs: #include lines from a folder into a lower one (width grows with "
             "the count; colour of the including folder). Table: the row's folder includes the "
             "column's, that many #include lines.", 11, fill="#444444")
    svg.text(20, foot + 18, "Red, dashed: an include that points up (the layer check refuses "
             "it). Hover an arc for its count. Regenerate: scripts/draw_design.py", 11,
             fill="#444444")
    return svg.render()


# ---- (b) one training step on one rank ------------------------------------------------------

def check_step_order(repo):
    for rel, head, calls in STEP_ORDER:
        path = os.path.join(repo, rel)
        if not os.path.isfile(path):
            fail(f"{rel}: missing; the step picture cites it (scripts/design_step.py)")
        with open(path, encoding="utf-8") as f:
            src = f.read()
        start = src.find(head)
        if start < 0:
            fail(f"{rel}: no '{head}'; the step picture follows it (update STEP and STEP_ORDER "
                 "in scripts/design_step.py)")
        end = src.find("\n}\n", start)
        body, at, prev = src[start:end if end > 0 else len(src)], 0, head
        for call in calls:
            i = body.find(call, at)
            if i < 0:
                fail(f"{rel}: '{call}' no longer follows '{prev}' in {head.strip('(')}...; the "
                     "step picture shows that order (update STEP and STEP_ORDER in "
                     "scripts/design_step.py)")
            at, prev = i + len(call), call
    for _, _, rel, _ in STEP:
        if not os.path.isfile(os.path.join(repo, rel)):
            fail(f"{rel}: missing; the step picture cites it")


def draw_step(repo):
    check_step_order(repo)
    width, x0, indent, pill_w = 1000, 30, 46, 50
    title_h, line_h, pad, gap = 26, 18, 8, 16
    heights = [title_h + line_h * len(lines) + pad for _, _, _, lines in STEP]
    height = 64 + sum(heights) + gap * (len(STEP) - 1) + 100
    svg = Svg(width, height, "loom: one training step on one rank")
    arrow_marker(svg, "flow", "#555555")
    svg.text(x0, 26, "One training step on one rank: the data path and the communication",
             16, weight="bold")
    svg.text(x0, 45, "Calls in the order src/ runs them (checked by scripts/draw_design.py); "
             "pills name the group a call communicates over.", 11.5, fill="#444444")
    y, boxes = 58, []
    for (level, title, rel, lines), h in zip(STEP, heights):
        x = x0 + indent * level
        w = width - x - x0
        svg.rect(x, y, w, h, "#eef3fb" if level == 0 else "#fdf6ec", "#8a94a6")
        svg.text(x + 10, y + 18, title, 13, weight="bold", extra=' class="step"')
        svg.text(x + w - 10, y + 18, rel, 10.5, anchor="end", fill="#666666", mono=True)
        if text_width(title, 13) + text_width(rel, 10.5, True) + 40 > w:
            fail(f"the title '{title}' is too long for its box")
        for i, (comm, line) in enumerate(lines):
            ly = y + title_h + i * line_h + 12
            tx = x + 14
            if comm:
                svg.rect(tx, ly - 11, pill_w - 8, 15, COMM[comm][1], rx=7)
                svg.text(tx + (pill_w - 8) / 2, ly, comm, 10, anchor="middle", weight="bold",
                         fill="#ffffff")
            if text_width(line, 11.5) > w - pill_w - 24:
                fail(f"the line '{line[:40]}...' is too long for its box")
            svg.text(tx + pill_w, ly, line, 11.5)
        boxes.append((level, x, y, h))
        y += h + gap
    # Arrows down between consecutive boxes, and the loop over the schedule's actions.
    for (l1, x1, y1, h1), (l2, x2, y2, _) in zip(boxes, boxes[1:]):
        ax = max(x1, x2) + 24
        svg.add(f'<path d="M{ax},{y1 + h1:.1f} L{ax},{y2 - 1:.1f}" stroke="#555555" '
                f'stroke-width="1.5" marker-end="url(#flow)"/>')
    inner = [b for b in boxes if b[0] == 1]
    if inner:
        lx, top, bottom = x0 + indent / 2, inner[0][2] + 14, inner[-1][2] + inner[-1][3] - 14
        svg.add(f'<path d="M{inner[-1][1]:.1f},{bottom:.1f} L{lx:.1f},{bottom:.1f} '
                f'L{lx:.1f},{top:.1f} L{inner[0][1] - 1:.1f},{top:.1f}" fill="none" '
                f'stroke="#b5651d" stroke-width="1.5" marker-end="url(#flow)"/>')
        my = (top + bottom) / 2
        svg.text(lx - 6, my, "next action of the schedule", 11, anchor="middle", fill="#b5651d",
                 extra=f' transform="rotate(-90 {lx - 6:.1f} {my:.1f})"')
    ly = y + 8
    svg.text(x0, ly, "Communication:", 11.5, weight="bold")
    for i, (name, (who, colour)) in enumerate(COMM.items()):  # three to a row
        lx, py = x0 + 110 + (i % 3) * 290, ly + (i // 3) * 20
        svg.rect(lx, py - 11, pill_w - 8, 15, colour, rx=7)
        svg.text(lx + (pill_w - 8) / 2, py, name, 10, anchor="middle", weight="bold",
                 fill="#ffffff")
        svg.text(lx + pill_w, py, who, 11)
    svg.text(x0, ly + 44, "N = micro_batch x seq_len tokens, C = d_model. Regenerate: "
             "scripts/draw_design.py", 11, fill="#444444")
    return svg.render()


def main():
    here = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
    ap = argparse.ArgumentParser(description="Draws docs/images/layers.svg and step.svg.")
    ap.add_argument("--repo", default=here)
    ap.add_argument("--out", default=None)
    ap.add_argument("--check", action="store_true")
    args = ap.parse_args()
    repo = os.path.abspath(args.repo)
    pictures = {"layers.svg": draw_layers(repo), "step.svg": draw_step(repo)}
    if args.check:
        stale = []
        for name, text in pictures.items():
            path = os.path.join(repo, "docs", "images", name)
            old = open(path, encoding="utf-8").read() if os.path.isfile(path) else None
            if old != text:
                stale.append(f"docs/images/{name}")
        for s in stale:
            print(f"{s} is stale (the tree has changed): run scripts/draw_design.py and commit it")
        return 1 if stale else 0
    out = os.path.abspath(args.out or os.path.join(repo, "docs", "images"))
    os.makedirs(out, exist_ok=True)
    for name, text in pictures.items():
        with open(os.path.join(out, name), "w", encoding="utf-8") as f:
            f.write(text)
        print(os.path.join(out, name))
    return 0


if __name__ == "__main__":
    sys.exit(main())
