#!/usr/bin/env python3
"""The learning curve of an EmerGNN run: validation macro-F1 (or recall@k on TWOSIDES) by epoch, as a table
and a text plot, with the last epochs' slope and a saturating fit.

Usage: python scripts/emergnn_curve.py RUN_DIR [--paper 62.0] [--by-frequency]

The run's ``results.json`` holds its training log (``system_info.epochs``: one row per epoch with the pairs
trained on, the seconds it took and, on validation epochs, the validation score). Epochs are counted in
passes over the training pairs, so a run with ``train_pairs_per_epoch`` (a quarter of the pairs, say) reads
on the same axis as a run of whole epochs. The fit, ``score(e) = top - gap * exp(-e / scale)`` by least
squares (scipy), is a reading aid for where the curve is heading, not a measurement.

``--by-frequency`` (single-label tasks) splits the test F1 by how many training pairs each type has: where
a macro-F1 gap sits (rare types learnt late, or every type a little worse). It loads the run's task (set
$DDIBENCH_MIRROR where GitHub is unreachable) and refuses a run whose task data changed since.
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path


def curve(run_dir: Path) -> tuple[list[tuple[float, float, float]], dict]:
    """(passes over the training pairs, validation score in %, cumulative training seconds) per validated epoch."""
    results = json.loads((run_dir / "results.json").read_text(encoding="utf-8"))
    info = results["system_info"]
    rows = info.get("epochs") or []
    if not rows:
        raise SystemExit(
            f"{run_dir}: results.json has no training log (system_info.epochs); is it an EmerGNN run that trained?"
        )
    key = next((k for k in ("valid_macro_f1", "valid_recall@5") if any(k in r for r in rows)), None)
    if key is None:
        key = next((k for r in rows for k in r if k.startswith("valid_")), None)
    if key is None:
        raise SystemExit(f"{run_dir}: no validation scores in the training log")
    per_epoch = _pairs_per_full_epoch(info, rows)
    points, passes, seconds = [], 0.0, 0.0
    for row in rows:
        passes += row["pairs"] / per_epoch
        seconds += row.get("seconds", 0.0)
        if key in row:
            points.append((passes, 100 * row[key], seconds))
    return points, {
        "metric": key,
        "best_epoch": info.get("best_epoch"),
        "pairs_per_full_epoch": per_epoch,
        "config": info.get("resolved_config", {}),
    }


def _pairs_per_full_epoch(info: dict, rows: list[dict]) -> float:
    """The pairs of a whole epoch: the mean of the log's ``pairs_available`` (pseudo-emerging resampling varies
    it a little from epoch to epoch); logs written before it was recorded trained on whole epochs."""
    available = [r["pairs_available"] for r in rows if "pairs_available" in r]
    return sum(available) / len(available) if available else float(max(r["pairs"] for r in rows))


def fit(points: list[tuple[float, float, float]]) -> tuple[float, float, float] | None:
    """Least-squares ``top - gap * exp(-e / scale)``; None when scipy is missing or the fit fails."""
    try:
        import numpy as np
        from scipy.optimize import curve_fit
    except ImportError:
        return None
    x = np.array([p[0] for p in points])
    y = np.array([p[1] for p in points])
    if len(x) < 4:
        return None
    try:
        params, _ = curve_fit(
            lambda e, top, gap, scale: top - gap * np.exp(-e / scale),
            x,
            y,
            p0=(y.max(), y.max() - y.min() + 1, 1.0),
            maxfev=20_000,
        )
    except (RuntimeError, ValueError):
        return None
    return float(params[0]), float(params[1]), float(params[2])


def plot(points: list[tuple[float, float, float]], paper: float | None, width: int = 56, height: int = 14) -> str:
    lo = min([p[1] for p in points] + ([paper] if paper else []))
    hi = max([p[1] for p in points] + ([paper] if paper else []))
    lo, hi = math.floor(lo - 1), math.ceil(hi + 1)
    xmax = max(p[0] for p in points)
    grid = [[" "] * width for _ in range(height)]
    if paper is not None:
        row = round((hi - paper) / (hi - lo) * (height - 1))
        grid[row] = ["-"] * width
    for x, y, _ in points:
        col = min(width - 1, round(x / xmax * (width - 1)))
        row = round((hi - y) / (hi - lo) * (height - 1))
        grid[row][col] = "*"
    lines = [f"{hi - i * (hi - lo) / (height - 1):6.1f} |" + "".join(r) for i, r in enumerate(grid)]
    lines.append("       +" + "-" * width)
    lines.append(f"        0{'epochs (passes over the training pairs)':^{width - 8}}{xmax:.1f}")
    if paper is not None:
        lines.append(f"        '-' marks the published value {paper}")
    return "\n".join(lines)


def by_frequency(run_dir: Path, bins: tuple[int, ...] = (0, 100, 500, 2000)) -> list[str]:
    """Per-type test F1 (scikit-learn) grouped by the type's number of training pairs."""
    from collections import Counter

    import numpy as np
    from sklearn.metrics import f1_score

    from ddibench.registry import get_task

    run = json.loads((run_dir / "run.json").read_text(encoding="utf-8"))
    task = get_task(run["task"]["name"])
    if task.data_sha256 != run["task"]["data_sha256"]:
        raise SystemExit(f"{run_dir}: the task's data changed since the run")
    data = task.load()
    gold = {s.id: s.target for s in data.split(run["split"])}
    if any(not isinstance(t, int) for t in gold.values()):
        raise SystemExit(f"{run_dir}: --by-frequency needs a single-label task")
    counts = Counter(s.label for s in data.split("train"))
    predicted = {}
    for line in (run_dir / "journal.jsonl").read_text(encoding="utf-8").splitlines():
        if line.strip():
            p = json.loads(line)["prediction"]
            predicted[p["sample_id"]] = p.get("label")
    ids = [i for i in gold if i in predicted]
    y = np.array([gold[i] for i in ids])
    yhat = np.array([-1 if predicted[i] is None else predicted[i] for i in ids])
    types = sorted(set(y.tolist()))
    f1 = dict(zip(types, f1_score(y, yhat, labels=types, average=None, zero_division=0)))
    lines = [
        f"test F1 by the type's training pairs ({len(types)} types in {len(ids):,} test pairs; macro-F1 {100 * np.mean(list(f1.values())):.1f})"
    ]
    edges = [*bins, None]
    for lo, hi in zip(edges, edges[1:]):
        group = [t for t in types if counts[t] >= lo and (hi is None or counts[t] < hi)]
        if group:
            pairs = int(sum((y == t).sum() for t in group))
            label = f">= {lo:,}" if hi is None else f"{lo:,}-{hi - 1:,}"
            lines.append(
                f"  {label:>11} training pairs: {len(group):3d} types, {pairs:6,} test pairs, mean F1 {100 * np.mean([f1[t] for t in group]):5.1f}, "
                f"{sum(f1[t] == 0 for t in group)} never right"
            )
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run_dir", type=Path)
    parser.add_argument("--paper", type=float, default=None, help="the published test value to draw beside the curve")
    parser.add_argument(
        "--by-frequency", action="store_true", help="also split the test F1 by each type's training pairs"
    )
    args = parser.parse_args()
    points, meta = curve(args.run_dir)
    print(
        f"{meta['metric']} by epoch ({meta['pairs_per_full_epoch']:,.0f} training pairs a full epoch; best epoch {meta['best_epoch']})"
    )
    print(f"{'epochs':>7} {'score':>7} {'seconds':>8}")
    for x, y, s in points:
        print(f"{x:7.2f} {y:7.2f} {s:8.0f}")
    if len(points) >= 3:
        tail = points[-max(3, len(points) // 4) :]
        slope = (tail[-1][1] - tail[0][1]) / max(tail[-1][0] - tail[0][0], 1e-9)
        print(f"slope over the last {len(tail)} points: {slope:+.2f} points per epoch")
    fitted = fit(points)
    if fitted and 0 <= fitted[0] <= 100 and fitted[2] <= 3 * points[-1][0]:
        top, gap, scale = fitted
        print(f"saturating fit: {top:.1f} - {gap:.1f} * exp(-epochs / {scale:.2f}) (a reading aid, not a measurement)")
    elif len(points) >= 4:
        print("no saturation within the trained epochs: the fit would extrapolate, so none is shown")
    print(plot(points, args.paper))
    if args.by_frequency:
        print("\n".join(by_frequency(args.run_dir)))


if __name__ == "__main__":
    main()
