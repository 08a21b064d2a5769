"""The verdict on a bundle: every check with its outcome, the trust tier earned, and what was read and
recomputed on the way (shared by the verifier, the consistency checks and reproduction)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ddibench.evaluation import EvaluationResult, Evaluator
from ddibench.runner.records import BundleIndex, Cost, Results, RunIdentity
from ddibench.schema import Prediction, Sample

TIERS = ("self-reported", "recomputed", "reproduced")


@dataclass
class Verdict:
    accepted: bool
    tier: str
    reasons: list[str] = field(default_factory=list)
    checks: list[tuple[str, bool, str]] = field(default_factory=list)
    recomputed: EvaluationResult | None = None
    bundle: BundleIndex | None = None
    run: RunIdentity | None = None
    results: Results | None = None
    predictions: dict[str, Prediction] = field(default_factory=dict)  # answers and traced calls (not whole traces)
    traces: dict[str, str] = field(
        default_factory=dict
    )  # sample id -> the whole trace as JSON (verify(keep_traces=True))
    evaluator: Evaluator | None = None
    samples: list[Sample] = field(default_factory=list)
    extras: dict[str, Any] = field(default_factory=dict)
    cost: Cost | None = None  # LLM calls and tokens recomputed from the traces
    reproduction: dict[str, Any] | None = None

    def blocking(self) -> list[str]:
        """The reasons other than --limit: a --limit run whose only reason is that one is a preview, its
        metrics recomputed like any other's, shown on the board but never ranked best."""
        return [r for r in self.reasons if not r.startswith("no --limit")]

    def is_preview(self) -> bool:
        return not self.accepted and bool(self.reasons) and not self.blocking()

    def check(self, name: str, ok: bool, detail: str) -> bool:
        self.checks.append((name, ok, detail))
        if not ok:
            self.reasons.append(f"{name}: {detail}")
        return ok

    @property
    def evaluation(self) -> EvaluationResult:
        """The metrics the board shows: recomputed here when they could be, else the claimed ones."""
        if self.recomputed is not None:
            return self.recomputed
        assert self.results is not None
        return self.results.evaluation
