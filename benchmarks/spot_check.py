"""Spot check: time the default workloads in this checkout's pld (one warm process).

Run it from two checkouts alternately (python -m benchmarks.spot_check N) and compare the
medians; each line of output is JSON: workload -> (median ms over N fresh PLDs, bracket).
"""

import json
import statistics
import sys
import time
import warnings

import pld

warnings.simplefilter("ignore")
W = {"mnist": (1.1, 256/60000, 14063, 1e-5), "sgd-1e4": (1.0, 0.01, 10**4, 1e-5), "huge-1e6": (2.0, 1e-3, 10**6, 1e-6),
     "tiny-loss": (4.0, 3.3e-4, 10**4, 1e-12), "long-1e5": (0.8, 0.004, 10**5, 1e-5),
     "s0.7-2e5": (0.7, 5e-4, 2*10**5, 1e-5), "s5-1e-10": (5.0, 0.01, 5*10**4, 1e-10)}
n = int(sys.argv[1]) if len(sys.argv) > 1 else 7
for s, q, T, d in W.values():
    pld.dpsgd(s, q, T).epsilon_bounds(d)  # warm
out = {}
for name, (s, q, T, d) in W.items():
    ts = []
    for _ in range(n):
        t = time.perf_counter()
        r = pld.dpsgd(s, q, T).epsilon_bounds(d)
        ts.append(time.perf_counter() - t)
    out[name] = (statistics.median(ts) * 1e3, r)
print(json.dumps(out))
