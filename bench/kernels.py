"""Pair evaluations per second of the probability kernels.

For 1-, 4- and 16-bucket histogram timestamps: the block kernels (``p_geq_block``,
``p_within_block``, what the operators call per micro-batch) against a scalar loop of
``p_geq`` (Theorem 1, one pair at a time), measured in the same run. Prints a table and
writes ``bench/out/kernels.png`` and ``bench/out/kernels.json``.

    python bench/kernels.py            # 1,000,000 pairs per size
    python bench/kernels.py --quick    # a smoke run
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np

from penumbra.probability import p_geq, p_geq_block, p_within_block, stime_table
from penumbra.timestamps import Histogram, HistogramBlock

OUT = Path(__file__).parent / "out"


def random_histograms(rng: np.random.Generator, count: int, buckets: int) -> list[Histogram]:
    out = []
    for _ in range(count):
        edges = rng.uniform(-50, 50) + np.concatenate(([0.0], np.cumsum(rng.uniform(0.5, 10.0, buckets))))
        out.append(Histogram(edges, rng.dirichlet(np.ones(buckets))))
    return out


def best_of(repeats: int, work) -> float:
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        work()
        times.append(time.perf_counter() - started)
    return min(times)


def measure(buckets: int, pairs: int, scalar_pairs: int, rng: np.random.Generator) -> dict:
    shapes = random_histograms(rng, 1000, buckets)
    pool = HistogramBlock.from_histograms(shapes)
    left_index, right_index = rng.integers(0, 1000, pairs), rng.integers(0, 1000, pairs)
    left, right = pool.take(left_index), pool.take(right_index)
    d = rng.uniform(-20, 20, pairs)
    geq = best_of(3, lambda: p_geq_block(left, right, d))
    within = best_of(3, lambda: p_within_block(left, right, np.abs(d)))
    fresh = best_of(3, lambda: p_geq_block(pool.take(left_index), pool.take(right_index), d))
    scalar = best_of(1, lambda: [p_geq(shapes[i], shapes[j], float(x))
                                 for i, j, x in zip(left_index[:scalar_pairs], right_index[:scalar_pairs],
                                                    d[:scalar_pairs])])
    templates = min(100, len(shapes))
    table = best_of(1, lambda: stime_table(shapes[:templates], shapes[:templates], 0.8))
    return {"buckets": buckets, "pairs": pairs,
            "p_geq_block_per_s": pairs / geq, "p_within_block_per_s": pairs / within,
            "p_geq_block_with_gather_per_s": pairs / fresh,
            "scalar_p_geq_per_s": scalar_pairs / scalar, "speedup": (pairs / geq) / (scalar_pairs / scalar),
            "stime_per_s": templates * templates / table}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    pairs, scalar_pairs = (20_000, 500) if args.quick else (1_000_000, 20_000)
    rng = np.random.default_rng(1)
    rows = [measure(buckets, pairs, scalar_pairs, rng) for buckets in (1, 4, 16)]
    print(f"{'buckets':>7} {'p_geq_block/s':>14} {'p_within/s':>12} {'+gather/s':>12} "
          f"{'scalar/s':>10} {'speed-up':>9} {'stime/s':>9}")
    for r in rows:
        print(f"{r['buckets']:>7} {r['p_geq_block_per_s']:>14,.0f} {r['p_within_block_per_s']:>12,.0f} "
              f"{r['p_geq_block_with_gather_per_s']:>12,.0f} {r['scalar_p_geq_per_s']:>10,.0f} "
              f"{r['speedup']:>8.0f}x {r['stime_per_s']:>9,.0f}")
    OUT.mkdir(exist_ok=True)
    (OUT / "kernels.json").write_text(json.dumps(rows, indent=2))
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4))
    x = np.arange(len(rows))
    for k, (key, label) in enumerate([("p_geq_block_per_s", "p_geq_block"), ("p_within_block_per_s", "p_within_block"),
                                      ("scalar_p_geq_per_s", "scalar p_geq loop")]):
        ax.bar(x + (k - 1) * 0.27, [r[key] for r in rows], 0.27, label=label)
    ax.axhline(5e6, color="grey", linestyle="--", linewidth=1, label="target, 4 buckets")
    ax.set_yscale("log")
    ax.set_xticks(x, [f"{r['buckets']} bucket(s)" for r in rows])
    ax.set_ylabel("pair evaluations per second (one core)")
    ax.set_title("Probability kernels")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(OUT / "kernels.png", dpi=120)
    print(f"wrote {OUT / 'kernels.png'}")


if __name__ == "__main__":
    main()
