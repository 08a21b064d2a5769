"""Molecular features shared by systems (RDKit is imported only when they are computed)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any


def morgan_matrix(smiles: Sequence[str], radius: int = 2, n_bits: int = 1024) -> tuple[Any, list[int]]:
    """A (molecules, n_bits) uint8 matrix of Morgan (ECFP-like) bits, and the indices whose SMILES RDKit
    cannot parse (their rows stay zero)."""
    import numpy as np
    from rdkit import Chem, RDLogger
    from rdkit.Chem import rdFingerprintGenerator

    RDLogger.DisableLog("rdApp.*")  # type: ignore[attr-defined]
    generator = rdFingerprintGenerator.GetMorganGenerator(radius=radius, fpSize=n_bits)
    out = np.zeros((len(smiles), n_bits), dtype=np.uint8)
    failed = []
    for i, smi in enumerate(smiles):
        mol = Chem.MolFromSmiles(smi) if smi else None
        if mol is None:
            failed.append(i)
            continue
        out[i] = generator.GetFingerprintAsNumPy(mol)
    return out, failed
