"""A trial command standing in for `compile-ahead run --report OUT` in `ab schedule`'s tests
(argv: schedule, ladder, out): a report with the schedule A/B's keys, values drawn from the
trial's index."""

from __future__ import annotations

# The eager schedule (i1) compiles every rung in the foreground, the one-ahead schedule (i2) only
# the first; "bad" flips one boundary token, "late" misses every boundary.
FAKE_RUN = """
import json, os, random, sys
schedule, ladder, out = sys.argv[1], [int(c) for c in sys.argv[2].split(",")], sys.argv[3]
if os.environ.get("FAIL_AT") == os.environ["CA_TRIAL_INDEX"]:
    sys.exit("fake run: injected failure")
rng = random.Random(int(os.environ["CA_TRIAL_INDEX"]))
fg = (8.0 if schedule == "i2" else 8.0 * len(ladder)) + rng.gauss(0, 0.1)
decode = 20.0 + rng.gauss(0, 0.1)
bounds, window = [], []
late = schedule == "late"
for i, (a, b) in enumerate(zip(ladder, ladder[1:])):
    bounds.append({"from": a, "to": b, "compile_s": 7.0, "decode_left_s": 9.0,
                   "ready": not late, "ready_margin_s": -0.5 if late else 2.0,
                   "wait_s": 0.5 if late else 0.0, "migration_s": 0.01,
                   "bytes_copied": 0})
    for j in range(4):  # two steps either side of the boundary at context a
        top1 = 11 * (i + 1) + j + (1 if schedule == "bad" and i == 0 and j == 1 else 0)
        window.append({"step": a + j - 2, "context": a + j - 2, "rung": a, "top1": top1,
                       "logits_digest": f"d{i}{j}"})
report = {"model": "tiny", "synthetic": True, "device": "CPU", "schedule": schedule,
          "ladder": ladder, "foreground_compile_s": fg + 3.0, "prefill_compile_s": 3.0,
          "critical_path_s": fg + decode,
          "decode_s": decode,
          "rungs": [{"capacity": c, "tokens": 10, "decode_s": 1.0, "tok_s": 10.0 + rng.random()}
                    for c in ladder],
          "boundaries": bounds, "boundary_tokens": window,
          "kv_reserved_avg_bytes": 1 << 20,
          "kv_reserved_peak_bytes": 2 << 20, "kv_committed_avg_bytes": 1 << 19,
          "graphs_resident_max": 2, "peak_rss_bytes": 100 << 20}
with open(out, "w") as fh:
    json.dump(report, fh)
"""
