#!/usr/bin/env python3
"""Is the MLP's score on an emerging-drug split explained by near-duplicate molecules?

On ``drugbank_s1_emergnn`` (EmerGNN's S1: every test pair has a drug never seen in training) the
fingerprint MLP scores far above the EmerGNN paper's MLP row (46.6 acc / 21.1 macro-F1). This script
counts, for every *emerging* test drug (a drug of a test pair that no training pair contains):

* whether its Morgan fingerprint, as the MLP sees it (radius 2, 1,024 bits), is *identical* to a
  training drug's (salts, stereo-isomers, duplicate records and folding collisions are invisible to
  the model), and whether its nearest training drug has Tanimoto >= 0.95;
* the same on 2,048 bits (to separate real duplicates from 1,024-bit folding collisions), and the
  InChIKey-free structural check: the same RDKit canonical SMILES without stereo and salts;

then, with ``--run RUN_DIR`` (a finished MLP run on the task), the MLP's accuracy / macro-F1 / kappa
on all test pairs, on the pairs whose emerging drug(s) have such a twin in training, and with those
pairs excluded; and by bins of the emerging drug's nearest-neighbour Tanimoto to the training drugs.

    python benchmarks/mlp_leakage.py [--task drugbank_s1_emergnn] [--run RUN_DIR]

Needs ``DDIBENCH_MIRROR``. Prints counts and scores; asserts nothing.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from ddibench.chem import morgan_matrix, tanimoto_matrix
from ddibench.metrics.bootstrap import BootstrapSpec
from ddibench.registry import get_task
from ddibench.runner.journal import Journal
from ddibench.schema import Sample

BINS = (0.0, 0.5, 0.7, 0.95, float("inf"))  # the last bin: 0.95 up to 1 (float32 similarities may pass 1 by a hair)


def skeleton(smiles: str) -> str:
    """Canonical SMILES of the largest fragment without stereochemistry (salt and stereo-isomer twins
    share it)."""
    from rdkit import Chem

    mol = Chem.MolFromSmiles(smiles) if smiles else None
    if mol is None:
        return ""
    frags = Chem.GetMolFrags(mol, asMols=True)
    largest = max(frags, key=lambda m: m.GetNumHeavyAtoms())
    Chem.RemoveStereochemistry(largest)
    return str(Chem.MolToSmiles(largest))


def nearest(test_smiles: list[str], train_smiles: list[str], n_bits: int) -> tuple[np.ndarray, np.ndarray]:
    """(identical fingerprint, max Tanimoto) of each test drug against the training drugs."""
    test_fp, _ = morgan_matrix(test_smiles, 2, n_bits)
    train_fp, _ = morgan_matrix(train_smiles, 2, n_bits)
    sim = tanimoto_matrix(test_fp, train_fp)
    keys = {row.tobytes() for row in train_fp if row.any()}
    identical = np.array([row.any() and row.tobytes() in keys for row in test_fp])
    return identical, sim.max(axis=1)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("--task", default="drugbank_s1_emergnn")
    ap.add_argument("--run", type=Path, help="a finished MLP run directory on the task (its journal.jsonl)")
    args = ap.parse_args(argv)
    task = get_task(args.task)
    data = task.load()
    train = data.split("train")
    test = data.split(task.eval_split)
    train_drugs = {d.drugbank_id: d for s in train for d in (s.input.head, s.input.tail)}  # type: ignore[union-attr]
    test_drugs = {d.drugbank_id: d for s in test for d in (s.input.head, s.input.tail)}  # type: ignore[union-attr]
    emerging = sorted(set(test_drugs) - set(train_drugs))
    train_ids = sorted(train_drugs)
    print(
        f"{args.task}: {len(train)} training pairs over {len(train_ids)} drugs; {len(test)} test pairs; "
        f"{len(emerging)} emerging test drugs (in no training pair)"
    )
    smiles_e = [test_drugs[i].smiles for i in emerging]
    smiles_t = [train_drugs[i].smiles for i in train_ids]
    same_1024, sim_1024 = nearest(smiles_e, smiles_t, 1024)
    same_2048, sim_2048 = nearest(smiles_e, smiles_t, 2048)
    train_skeletons = {skeleton(s) for s in smiles_t} - {""}
    same_skeleton = np.array([skeleton(s) in train_skeletons for s in smiles_e])
    no_smiles = sum(1 for s in smiles_e if not s)
    n = len(emerging)
    print(f"\nemerging test drugs with a training twin (of {n}; {no_smiles} without SMILES):")
    print(
        f"  identical 1,024-bit Morgan fingerprint (what the MLP sees): {int(same_1024.sum()):>4}  ({same_1024.mean():.1%})"
    )
    print(
        f"  nearest training drug Tanimoto >= 0.95 (1,024 bits):        {int((sim_1024 >= 0.95).sum()):>4}  ({(sim_1024 >= 0.95).mean():.1%})"
    )
    print(
        f"  identical 2,048-bit Morgan fingerprint:                     {int(same_2048.sum()):>4}  ({same_2048.mean():.1%})"
    )
    print(
        f"  nearest training drug Tanimoto >= 0.95 (2,048 bits):        {int((sim_2048 >= 0.95).sum()):>4}  ({(sim_2048 >= 0.95).mean():.1%})"
    )
    print(
        f"  same structure without salts and stereo (canonical SMILES): {int(same_skeleton.sum()):>4}  ({same_skeleton.mean():.1%})"
    )
    print(
        f"  nearest-neighbour Tanimoto (1,024 bits): median {np.median(sim_1024):.2f}, "
        f"quartiles {np.quantile(sim_1024, 0.25):.2f}-{np.quantile(sim_1024, 0.75):.2f}"
    )
    twins = (sim_1024 >= 0.95) | same_skeleton
    print(
        f"  either (a twin: Tanimoto >= 0.95 or the same salt/stereo-free structure):  {int(twins.sum()):>4}  ({twins.mean():.1%})"
    )
    twin = {d for d, t in zip(emerging, twins) if t}
    best = dict(zip(emerging, sim_1024))

    def pair_sim(s: object) -> float:
        """The lowest nearest-neighbour similarity of the pair's emerging drug(s)."""
        ids = [d.drugbank_id for d in (s.input.head, s.input.tail) if d.drugbank_id in best]  # type: ignore[attr-defined]
        return min(best[i] for i in ids) if ids else 1.0

    leaked = [s for s in test if any(d.drugbank_id in twin for d in (s.input.head, s.input.tail))]  # type: ignore[union-attr]
    print(
        f"\ntest pairs with an emerging drug that has a training twin: {len(leaked)} of {len(test)} ({len(leaked) / len(test):.1%})"
    )
    if args.run is None:
        return 0
    predictions = Journal(args.run / "journal.jsonl").load(repair=False)
    evaluator = task.evaluator()
    spec = BootstrapSpec(replicates=200)
    leaked_ids = {s.id for s in leaked}

    def scores(samples: Sequence[Sample]) -> str:
        if not samples:
            return "—"
        ev = evaluator.evaluate(samples, {s.id: predictions[s.id] for s in samples}, spec)
        return "  ".join(
            f"{m} {100 * v.value:5.1f} [{100 * (v.ci_low or 0):5.1f}, {100 * (v.ci_high or 0):5.1f}]"
            for m, v in ev.metrics.items()
        )

    print(f"\nMLP ({args.run}) on {args.task} test pairs (%, BCa drug-clustered 95% CI):")
    print(f"  all pairs                     n={len(test):>6}  {scores(test)}")
    print(f"  pairs with a twin             n={len(leaked):>6}  {scores(leaked)}")
    rest = [s for s in test if s.id not in leaked_ids]
    print(f"  twin pairs excluded           n={len(rest):>6}  {scores(rest)}")
    print("\nby the emerging drug's nearest-neighbour Tanimoto to the training drugs (1,024 bits):")
    for lo, hi in zip(BINS, BINS[1:]):
        part = [s for s in test if lo <= pair_sim(s) < hi]
        print(f"  [{lo:.2f}, {min(hi, 1.0):.2f}{']' if hi > 1 else ')'}  n={len(part):>6}  {scores(part)}")
    print("\nthe EmerGNN paper's MLP (Table 1, S1, mean of 5 seeds): accuracy 46.6, macro-F1 21.1, kappa 33.4")
    return 0


if __name__ == "__main__":
    sys.exit(main())
