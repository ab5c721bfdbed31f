#!/usr/bin/env python3
"""Checks scripts/plot_metrics.py writes a non-empty PNG from fake metrics, and its expert-load
numbers for a Mixture-of-Experts run against hand-computed ones (exit 77: skipped)."""
import json
import os
import subprocess
import sys
import tempfile
import unittest

SCRIPT = sys.argv[1] if len(sys.argv) > 1 else os.path.join(
    os.path.dirname(os.path.abspath(__file__)), "..", "..", "scripts", "plot_metrics.py")
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def write_run(root, name, steps, with_extras):
    d = os.path.join(root, name)
    os.makedirs(d)
    with open(os.path.join(d, "metrics.jsonl"), "w") as f:
        for s in steps:
            line = {"step": s, "loss": 11.0 - 0.1 * s, "lr": 1e-3, "grad_norm": 1.0,
                    "tokens": 512 * s, "step_ms": 1000.0 + s, "tokens_per_s": 500.0 - s,
                    "mfu": 0.01 if with_extras else None, "mem_peak_bytes": 1 << 27}
            if with_extras:
                line["time"] = {"compute": 600.0, "tp_comm": 150.0, "pp_wait": 200.0,
                                "dp_comm": 50.0}
            f.write(json.dumps(line) + "\n")
            if with_extras and s % 10 == 0:
                f.write(json.dumps({"step": s, "val_loss": 11.2 - 0.1 * s}) + "\n")
        if with_extras:
            f.write('{"step": 99, "loss": 1.')  # a torn last line (killed mid-write)
    return d


def load_module():
    import importlib.util
    spec = importlib.util.spec_from_file_location("plot_metrics", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


class PlotMetrics(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.root = self.tmp.name
        self.env = dict(os.environ, MPLCONFIGDIR=os.path.join(self.root, "mpl"))

    def tearDown(self):
        self.tmp.cleanup()

    def run_script(self, *args):
        return subprocess.run([sys.executable, SCRIPT, *args], env=self.env,
                              capture_output=True, text=True, timeout=100)

    def check_png(self, path):
        self.assertTrue(os.path.isfile(path), path)
        self.assertGreater(os.path.getsize(path), 1000)
        with open(path, "rb") as f:
            self.assertEqual(f.read(8), PNG_MAGIC)

    def test_expert_load(self):
        # Two layers of 4 experts: shares 6/12 and 3/12 (mean 0.375); dropped 2/12 and 0.
        lines = [{"step": 1, "loss": 9.0, "moe": {"tokens_per_expert": [[6, 2, 2, 2], [3, 3, 3, 3]],
                                                 "dropped": [2, 0]}},
                 {"step": 2, "loss": 8.0},  # a line without moe (not logged): skipped
                 {"step": 3, "loss": 7.0, "moe": {"tokens_per_expert": [[1, 1, 1, 1]],
                                                 "dropped": [0]}}]
        got = load_module().expert_load(lines)
        self.assertEqual([g[0] for g in got], [1, 3])
        self.assertAlmostEqual(got[0][1], (6 / 12 + 3 / 12) / 2)
        self.assertAlmostEqual(got[0][2], (2 / 12 + 0) / 2)
        self.assertAlmostEqual(got[1][1], 0.25)
        self.assertEqual(load_module().expert_load([{"step": 1, "loss": 1.0}]), [])
        # And a figure with the panel.
        d = os.path.join(self.root, "moe_run")
        os.makedirs(d)
        with open(os.path.join(d, "metrics.jsonl"), "w") as f:
            for line in lines:
                f.write(json.dumps(line) + "\n")
        r = self.run_script(d)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.check_png(os.path.join(d, "metrics.png"))

    def test_two_runs_to_explicit_out(self):
        a = write_run(self.root, "run_a", [1] + list(range(10, 61, 10)), with_extras=True)
        b = write_run(self.root, "run_b", list(range(1, 31)), with_extras=False)
        out = os.path.join(self.root, "plots", "both.png")
        r = self.run_script(a, os.path.join(b, "metrics.jsonl"), "--out", out)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(r.stdout.strip(), out)
        self.assertIn("skipped 1 unreadable line", r.stderr)
        self.check_png(out)

    def test_default_out_is_first_run_dir(self):
        b = write_run(self.root, "run_b", list(range(1, 31)), with_extras=False)
        r = self.run_script(b)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.check_png(os.path.join(b, "metrics.png"))

    def test_missing_run_is_one_clear_error(self):
        r = self.run_script(os.path.join(self.root, "nope"))
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("no metrics file", r.stderr)


if __name__ == "__main__":
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        print("test_plot_metrics: skipped: matplotlib is not installed for " + sys.executable +
              " (Debian: apt-get install python3-matplotlib)")
        sys.exit(77)
    sys.exit(0 if unittest.main(argv=[sys.argv[0]], exit=False).result.wasSuccessful() else 1)
