"""Molecular chemistry shared by task families and systems (RDKit is imported only when something is computed).

* :func:`standardize` — one molecule's RDKit canonical (isomeric) SMILES, standard InChIKey and Bemis-Murcko
  scaffold, or None when RDKit cannot parse the SMILES. Tasks deduplicate on the canonical SMILES, look
  annotations up by InChIKey and cluster by scaffold.
* :func:`scaffold_split` — deterministic Bemis-Murcko scaffold splits (80/10/10 by default): DeepChem's, and a
  balanced order for files sorted by label.
* :func:`morgan_matrix` — Morgan (ECFP-like) bit vectors as a numpy matrix; :func:`tanimoto_matrix` —
  Tanimoto similarity between two such matrices (nearest neighbours, KG anchor search).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any


def _chem() -> Any:
    from rdkit import Chem, RDLogger

    RDLogger.DisableLog("rdApp.*")  # type: ignore[attr-defined]
    return Chem


@dataclass(frozen=True, slots=True)
class Standardized:
    canonical: str  # RDKit canonical isomeric SMILES
    inchikey: str  # standard InChIKey ("" when RDKit cannot compute one)
    scaffold: str  # Bemis-Murcko scaffold SMILES ("" for a molecule without rings)


def standardize(smiles: str) -> Standardized | None:
    """Canonical SMILES, InChIKey and scaffold of one molecule; None when RDKit cannot parse it."""
    from rdkit.Chem.Scaffolds import MurckoScaffold

    chem = _chem()
    mol = chem.MolFromSmiles(smiles) if smiles else None
    if mol is None:
        return None
    try:
        key = chem.MolToInchiKey(mol) or ""
    except Exception:  # InChI fails on a few exotic molecules (e.g. wildcard atoms); the key is then unknown
        key = ""
    try:
        scaffold = MurckoScaffold.MurckoScaffoldSmiles(mol=mol, includeChirality=False)
    except Exception:  # a molecule RDKit parses but cannot reduce keeps its own SMILES as scaffold
        scaffold = chem.MolToSmiles(mol)
    return Standardized(canonical=chem.MolToSmiles(mol), inchikey=key, scaffold=scaffold)


def canonical_smiles(smiles: str) -> str | None:
    """RDKit's canonical isomeric SMILES, or None when the SMILES does not parse."""
    chem = _chem()
    mol = chem.MolFromSmiles(smiles) if smiles else None
    return chem.MolToSmiles(mol) if mol is not None else None


def inchikey(smiles: str) -> str:
    """The standard InChIKey of a SMILES ("" when RDKit cannot parse it or compute the key)."""
    found = standardize(smiles)
    return found.inchikey if found else ""


SCAFFOLD_ORDERS = ("deepchem", "balanced")


def scaffold_split(
    scaffolds: Sequence[str], fractions: tuple[float, float, float] = (0.8, 0.1, 0.1), order: str = "deepchem"
) -> list[str]:
    """Assign each molecule to "train", "valid" or "test" by its Bemis-Murcko scaffold (deterministic).

    Molecules sharing a scaffold form one set (molecules without rings share the empty scaffold). The
    sets are taken in turn and each goes to train while train stays within ``fractions[0]`` of the
    molecules, else to valid while train + valid stay within ``fractions[0] + fractions[1]``, else to
    test. ``order`` decides the turn:

    * ``"deepchem"`` — DeepChem's ``ScaffoldSplitter`` (the MoleculeNet / OGB scaffold split): largest
      set first, ties broken by the set's first molecule, later first. Large scaffold families train;
      the evaluation splits hold rare scaffolds, in the order of the input file.
    * ``"balanced"`` — for files whose row order follows the label (TDC's toxicity tables list one class
      first, so DeepChem's order would fill the test split with one class): sets larger than half the
      test share go first, largest first; the others in the order of the sha256 of their scaffold SMILES,
      a fixed pseudo-random order that no row order or label can steer (in the spirit of chemprop's
      ``scaffold_balanced``, without a random generator).
    """
    import hashlib

    if len(fractions) != 3 or abs(sum(fractions) - 1) > 1e-9 or min(fractions) < 0:
        raise ValueError(f"fractions must be three non-negative numbers summing to 1, got {fractions}")
    if order not in SCAFFOLD_ORDERS:
        raise ValueError(f"order must be one of {SCAFFOLD_ORDERS}, got {order!r}")
    groups: dict[str, list[int]] = {}
    for i, scaffold in enumerate(scaffolds):
        groups.setdefault(scaffold, []).append(i)
    n = len(scaffolds)
    if order == "deepchem":
        ordered = sorted(groups.values(), key=lambda idx: (len(idx), idx[0]), reverse=True)
    else:
        big = fractions[2] * n / 2
        keyed = sorted(
            groups.items(),
            key=lambda kv: (
                len(kv[1]) <= big,
                -len(kv[1]) if len(kv[1]) > big else 0,
                hashlib.sha256(kv[0].encode()).hexdigest(),
            ),
        )
        ordered = [idx for _, idx in keyed]
    train_cut, valid_cut = fractions[0] * n, (fractions[0] + fractions[1]) * n
    out = [""] * n
    n_train = n_valid = 0
    for idx in ordered:
        if n_train + len(idx) > train_cut:
            if n_train + n_valid + len(idx) > valid_cut:
                split = "test"
            else:
                split, n_valid = "valid", n_valid + len(idx)
        else:
            split, n_train = "train", n_train + len(idx)
        for i in idx:
            out[i] = split
    return out


def morgan_matrix(smiles: Sequence[str], radius: int = 2, n_bits: int = 1024) -> tuple[Any, list[int]]:
    """A (molecules, n_bits) uint8 matrix of Morgan (ECFP-like) bits, and the indices whose SMILES RDKit
    cannot parse (their rows stay zero)."""
    import numpy as np
    from rdkit.Chem import rdFingerprintGenerator

    chem = _chem()
    generator = rdFingerprintGenerator.GetMorganGenerator(radius=radius, fpSize=n_bits)
    out = np.zeros((len(smiles), n_bits), dtype=np.uint8)
    failed = []
    for i, smi in enumerate(smiles):
        mol = chem.MolFromSmiles(smi) if smi else None
        if mol is None:
            failed.append(i)
            continue
        out[i] = generator.GetFingerprintAsNumPy(mol)
    return out, failed


def tanimoto_matrix(a: Any, b: Any) -> Any:
    """Tanimoto similarity of every row of bit matrix ``a`` to every row of ``b``: shape (len(a), len(b)).

    Written with numpy on the matrices :func:`morgan_matrix` returns (one matrix product for a whole
    query batch); equal to RDKit's ``BulkTanimotoSimilarity`` on the same bits (tested). Two empty
    fingerprints have similarity 0.
    """
    import numpy as np

    a = np.asarray(a, dtype=np.float32)
    b = np.asarray(b, dtype=np.float32)
    inter = a @ b.T
    union = a.sum(axis=1)[:, None] + b.sum(axis=1)[None, :] - inter
    return np.divide(inter, union, out=np.zeros_like(inter), where=union > 0)
