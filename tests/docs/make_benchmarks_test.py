#!/usr/bin/env python3
"""Tests of tools/docs/make_benchmarks.py (ctest `docs_make_benchmarks`).

The generator must be deterministic, give every kind of result row its
table with the right columns, and its --check must pass on a current page
and fail, naming the command that regenerates it, on a stale one.
"""
import contextlib
import io
import json
import os
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.join(REPO, "tools", "docs"))
import make_benchmarks  # noqa: E402

COST = [
    {"arm": "full cache", "bytes_per_party": 174543176, "cache": "prepared", "heads": 8, "hidden": 1024,
     "latency_s": 6.25, "layers": 32, "length": 512, "model": "llama2-h1024", "model_s": 4.06,
     "model_s_is": "model: rounds x 0.3 ms + bytes / 377 MB/s + wall / 3", "parties": "in-process",
     "peak_rss_per_party_bytes": 1925331626, "phase": "decode", "policy": "full", "preset": "paper-fig10",
     "rounds": 5063, "steps": 2, "first_step": {"bytes_per_party": 173418824, "model_s": 4.5, "rounds": 5062},
     "breakdown": {"softmax": {"bytes": 97726464, "model_s": 1.3, "rounds": 2528, "share": 0.37}}},
]
FIDELITY = [
    {"budget": 1.0, "context": 1024, "metric": "ppl", "policy": "full", "preset": "fidelity", "samples": 504,
     "value": 3.589145571348124},
    {"budget": 1.0, "context": 1024, "metric": "passkey_acc", "policy": "full", "preset": "fidelity",
     "samples": 100, "value": 1.0},
    {"budget": 0.1, "context": 1024, "metric": "ppl", "policy": "mpcache", "preset": "fidelity", "samples": 504,
     "value": 3.596},
    {"budget": 0.1, "context": 1024, "metric": "passkey_acc", "policy": "mpcache", "preset": "fidelity",
     "samples": 100, "value": 0.0},
]
PRIVATE = [
    {"agreement": 0.9984375, "budget": 48, "max_logit_error": 0.0485, "mean_logit_error": 0.0119, "near": 1.0,
     "policy": "mpcache", "preset": "private-fidelity", "prompt_bytes": 512, "prompts": 20, "row": "policy",
     "seed": 7, "steps": 640, "tokens": 32, "truncation": "exact"},
]
CASES = [
    {"bytes_max_party": 8000000, "bytes_total": 24000000, "case": "mul-1M", "latency_s": 0.057, "link": "none",
     "protocol": "rss3", "rounds": 1, "transport": "in-process", "date": "2026-11-27", "commit": "abc1234"},
]


def write_results(folder, files):
    for name, rows in files.items():
        with open(os.path.join(folder, name), "w", encoding="utf-8") as f:
            for r in rows:
                f.write(json.dumps(r, sort_keys=True) + "\n")


def run_main(args):
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        status = make_benchmarks.main(args)
    return status, out.getvalue(), err.getvalue()


class MakeBenchmarksTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.results = os.path.join(self.tmp.name, "results")
        os.makedirs(self.results)
        write_results(self.results, {"b-cost.jsonl": COST, "a-fidelity.jsonl": FIDELITY,
                                     "c-private.jsonl": PRIVATE, "d-cases.jsonl": CASES})
        self.notes = os.path.join(self.tmp.name, "notes.json")
        with open(self.notes, "w", encoding="utf-8") as f:
            json.dump({"_about": "comment", "b-cost.jsonl": ["Made by hand for a test."]}, f)
        self.doc = os.path.join(self.tmp.name, "benchmarks.md")

    def tearDown(self):
        self.tmp.cleanup()

    def generate(self):
        return make_benchmarks.generate(self.results, self.notes)

    def test_deterministic_and_sorted_by_file(self):
        text = self.generate()
        self.assertEqual(text, self.generate())
        order = [text.index("## " + n) for n in ("a-fidelity.jsonl", "b-cost.jsonl", "c-private.jsonl",
                                                  "d-cases.jsonl")]
        self.assertEqual(order, sorted(order))
        self.assertTrue(text.endswith("|\n"))

    def test_the_repository_page_is_deterministic(self):
        results = os.path.join(REPO, "bench", "results")
        notes = os.path.join(REPO, "tools", "docs", "benchmark_notes.json")
        self.assertEqual(make_benchmarks.generate(results, notes), make_benchmarks.generate(results, notes))

    def test_cost_rows(self):
        text = self.generate()
        self.assertIn("Made by hand for a test.", text)
        self.assertIn("Model: llama2-h1024 (32 layers, hidden 1024, 8 heads).", text)
        self.assertIn("| full cache | 512 | decode | prepared | 5,063 | 174.5 MB | 4.06 s | 6.25 s | 5,062, 173.4 MB"
                      " | 1.93 GB |", text)
        self.assertIn("| full cache | 512 | 2,528 / 97.73 MB |", text)

    def test_cost_rows_of_several_layer_counts_name_theirs(self):
        write_results(self.results, {"b-cost.jsonl": COST + [dict(COST[0], layers=2)]})
        text = self.generate()
        self.assertIn("| full cache, 32 layers | 512 | decode |", text)
        self.assertIn("| full cache, 2 layers | 512 | decode |", text)

    def test_fidelity_rows(self):
        text = self.generate()
        self.assertIn("| 1,024 | full | 1 | 3.589 | 1.00 | - | - | 504 | 100 |", text)
        self.assertIn("| 1,024 | mpcache | 0.1 | 3.596 | 0.00 | - | - | 504 | 100 |", text)

    def test_private_fidelity_rows(self):
        self.assertIn("| mpcache | 7 | exact | 48 | 20 x 512 x 32 | 639/640 | 640/640 | 0.0485 | 0.0119 |",
                      self.generate())

    def test_case_rows_show_date_and_commit(self):
        text = self.generate()
        self.assertIn("| case | protocol | transport | link | latency | bytes, busiest party | rounds | date | commit |",
                      text)
        self.assertIn("| mul-1M | rss3 | in-process | none | 57.0 ms | 8.00 MB | 1 | 2026-11-27 | abc1234 |", text)

    def test_check_passes_on_a_current_page(self):
        with open(self.doc, "w", encoding="utf-8") as f:
            f.write(self.generate())
        status, out, _ = run_main(["--results", self.results, "--notes", self.notes, "--doc", self.doc, "--check"])
        self.assertEqual(status, 0)
        self.assertIn("is current", out)

    def test_check_fails_on_a_stale_page_and_says_how_to_regenerate(self):
        with open(self.doc, "w", encoding="utf-8") as f:
            f.write(self.generate().replace("5,063", "5,064"))
        status, _, err = run_main(["--results", self.results, "--notes", self.notes, "--doc", self.doc, "--check"])
        self.assertEqual(status, 1)
        self.assertIn("-| full cache | 512 | decode | prepared | 5,064", err)
        self.assertIn("+| full cache | 512 | decode | prepared | 5,063", err)
        self.assertIn("python3 tools/docs/make_benchmarks.py > docs/benchmarks.md", err)

    def test_check_fails_on_a_missing_page(self):
        status, _, err = run_main(["--results", self.results, "--notes", self.notes,
                                   "--doc", self.doc + ".missing", "--check"])
        self.assertEqual(status, 1)
        self.assertIn("python3 tools/docs/make_benchmarks.py > docs/benchmarks.md", err)

    def test_a_note_for_a_missing_file_is_refused(self):
        with open(self.notes, "w", encoding="utf-8") as f:
            json.dump({"gone.jsonl": ["a note"]}, f)
        with self.assertRaises(SystemExit) as e:
            self.generate()
        self.assertIn("gone.jsonl", str(e.exception))

    def test_a_bad_line_names_the_file_and_line(self):
        with open(os.path.join(self.results, "e-bad.jsonl"), "w", encoding="utf-8") as f:
            f.write('{"case": "x"}\nnot json\n')
        with self.assertRaises(SystemExit) as e:
            self.generate()
        self.assertIn("e-bad.jsonl:2", str(e.exception))


if __name__ == "__main__":
    unittest.main()
