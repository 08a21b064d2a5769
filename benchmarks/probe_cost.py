#!/usr/bin/env python3
"""What the captioning probe costs per dataset: seconds of the ``linear`` and ``finetune`` probes.

For each captioning task (``caption_bbbp``, ``caption_sider``, ``caption_clintox``, ``caption_bace``) on its
full splits:

* ``linear``: the whole probe as ``ddibench`` scores a run (fingerprints, the frozen encoder's embedding
  of every caption, the L2 choice on validation, 5 seeds x the label columns), timed twice: with empty
  captions (the ``only-smiles`` system: one distinct text to embed) and with a distinct 60-word caption
  per molecule (what an LLM system writes: every caption is embedded).
* ``finetune``: fine-tuning the encoder on ``SMILES [SEP] caption`` is timed for ``--steps`` optimiser
  steps at batch 32 (60-word captions) plus one inference pass over the test molecules; the cost of
  the whole protocol (5 seeds x ``--epochs`` epochs, a validation pass per epoch, the test pass) is
  extrapolated from those measurements and printed beside them, marked as an estimate.

Also: one AUROC with scikit-learn's ``roc_auc_score`` vs ddibench's vectorised weighted AUROC over 1,000
bootstrap replicates (why the intervals do not call scikit-learn per replicate).

    python benchmarks/probe_cost.py [--tasks caption_bbbp ...] [--steps 3] [--epochs 10] [--skip-finetune]

Prints seconds; asserts nothing. Needs the mirror ($DDIBENCH_MIRROR) and the ml + embed extras.
"""

from __future__ import annotations

import argparse
import math
import os
import platform
import time

import numpy as np

from ddibench.evaluation import ProbeData, finetune_probe, linear_probe
from ddibench.evaluation.probe import FINETUNE, N_SEEDS
from ddibench.registry import get_task

WORDS = (
    "polar lipophilic aromatic amine hydroxyl carboxylic basic acidic charged neutral ring fused halogen ester amide "
    "sulfonamide ether ketone permeable transporter efflux binding pocket inhibitor substrate metabolite"
).split()


def caption(i: int, n_words: int = 60) -> str:
    rng = np.random.default_rng(i)
    return f"Molecule {i}: " + " ".join(rng.choice(WORDS, n_words))


def parts(task_name: str, texts: bool) -> tuple[ProbeData, ProbeData, ProbeData]:
    task = get_task(task_name)
    data = task.load()
    out = []
    for split in ("train", "valid", "test"):
        samples = data.splits[split]
        labels = np.array(
            [[np.nan if s.target[c] is None else float(s.target[c]) for c in task.columns] for s in samples]
        )  # type: ignore[attr-defined,index]
        captions = [caption(int(s.id.split("-")[-1][:8], 16)) if texts else "" for s in samples]
        out.append(ProbeData([s.input.smiles for s in samples], captions, labels))  # type: ignore[union-attr]
    return out[0], out[1], out[2]


def auroc_timing() -> None:
    from sklearn.metrics import roc_auc_score

    from ddibench.metrics.auroc import weighted_auroc

    rng = np.random.default_rng(0)
    n = 200
    y, s = rng.integers(0, 2, n), rng.random(n)
    w = rng.multinomial(n, np.full(n, 1 / n), size=1000).astype(float)
    t0 = time.perf_counter()
    for r in range(1000):
        roc_auc_score(y, s, sample_weight=w[r])
    sk = time.perf_counter() - t0
    t0 = time.perf_counter()
    weighted_auroc(y, s, w)
    ours = time.perf_counter() - t0
    print(
        f"AUROC over 1,000 replicates of 200 molecules: scikit-learn {sk:.2f} s, vectorised {ours * 1000:.1f} ms "
        f"(x{sk / ours:.0f}); a 27-column, 5-seed probe needs 135 of these"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--tasks", nargs="*", default=["caption_bbbp", "caption_sider", "caption_clintox", "caption_bace"]
    )
    parser.add_argument("--steps", type=int, default=3, help="fine-tuning steps timed per dataset")
    parser.add_argument("--epochs", type=int, default=10, help="epochs of the full finetune protocol (extrapolation)")
    parser.add_argument("--skip-finetune", action="store_true")
    args = parser.parse_args()
    print(
        f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f}"
    )
    auroc_timing()
    linear_probe(*parts("caption_bace", False), seeds=1)  # warm-up: loads the encoder once
    batch = int(FINETUNE["batch_size"])
    for name in args.tasks:
        empty, texts = parts(name, False), parts(name, True)
        train, valid, test = texts
        t0 = time.perf_counter()
        linear_probe(*empty)
        only_smiles = time.perf_counter() - t0
        t0 = time.perf_counter()
        linear_probe(*texts)
        with_captions = time.perf_counter() - t0
        cols = train.labels.shape[1]
        print(f"{name}: {len(train.smiles)}/{len(valid.smiles)}/{len(test.smiles)} molecules, {cols} label column(s)")
        print(
            f"  linear  : {only_smiles:6.1f} s with empty captions (only-smiles), {with_captions:6.1f} s with 60-word captions"
        )
        if args.skip_finetune:
            continue
        t0 = time.perf_counter()
        finetune_probe(train, None, test, seeds=1, epochs=1, max_steps=args.steps, device=None)
        measured = time.perf_counter() - t0
        t0 = time.perf_counter()
        finetune_probe(train, None, test, seeds=1, epochs=1, max_steps=1, device=None)
        one = time.perf_counter() - t0
        per_step = (measured - one) / max(args.steps - 1, 1)  # the difference cancels model loading and the test pass
        fixed = one - per_step
        steps = math.ceil(len(train.smiles) / batch) * args.epochs
        inference = fixed * (len(valid.smiles) / max(len(test.smiles), 1)) * args.epochs  # a validation pass per epoch
        total = N_SEEDS * (steps * per_step + fixed + inference)
        print(
            f"  finetune: {per_step:6.1f} s per step at batch {batch} (measured over {args.steps} steps), {fixed:.1f} s load + test pass;"
            f" estimate for {N_SEEDS} seeds x {args.epochs} epochs ({steps} steps each): {total / 3600:.1f} h"
        )


if __name__ == "__main__":
    main()
