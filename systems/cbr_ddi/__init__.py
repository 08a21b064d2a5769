"""``cbr-ddi``: case-based reasoning for DDI prediction (Liu et al. 2025), stage by stage.

1. **Drug descriptions** — the describer LLM writes a concise functional description of each drug from
   its name (``LLM_des``); cached per drug and model (the response cache) and kept with the cases.
   **GNN module** — ddibench's EmerGNN. Its drug features (``gnn_features``) are by default the paper's
   (Algorithm 1, ``h0 = f(D_u)``): every drug of the task's catalogue is described first, the text encoder
   ``f`` (MiniLM, all-MiniLM-L6-v2, 384 dimensions, in place of the paper's encoder) embeds the descriptions,
   and EmerGNN trains on that matrix, projected to its dimension, in place of Morgan fingerprints; its
   checkpoint is keyed by the matrix's hash, so another describer model or encoder trains its own.
   ``gnn_features="morgan"`` keeps EmerGNN's own features (Morgan fingerprints on S1/S2, learned embeddings
   on S0), a declared variant and deviation; every run recorded before the key was made so, and a recorded
   configuration without it reads as ``morgan``.
2. **Knowledge repository** — a seeded random subset of *training* pairs (``repository_size``; None: all of them,
   the paper's pool), or a seeded draw within every interaction type (``repository_per_type``); each case holds both
   descriptions, the top-P drug-association paths from the GNN module (EmerGNN attention, with the
   pair's own interaction edge hidden), a mechanistic insight the LLM writes given the correct label
   and the paths (empty when it sees no grounds), and the label. Stored as an artifact keyed by its
   configuration, models, GNN and data; a second run builds nothing.
3. **Hybrid retrieval** — ``s = lam * cos(f(D_p), f(D_c)) + (1 - lam) * cos(h_p, h_c)`` with ``f`` the text
   encoder and ``h`` EmerGNN's pair representation; top-K cases.
4. **Two-tier prompt** — task description; the K cases (descriptions, insight, label); the query's own
   top-P paths; the top-N candidate labels by GNN score. The LLM returns ``{"mechanism", "type"}``
   (constrained JSON where the server supports it).
5. **Refinement and sampling** — cases are answered leave-one-out and their insight is rewritten when
   the prediction is wrong; K-medoids within each class on insight embeddings keeps the representative
   cases (about 5%, at least 10 per class).

On label-set tasks (TWOSIDES side effects) a case holds the pair's side effects, the GNN offers its top-N
side effects (N = 10 unless ``n_candidates`` is given, as in the paper) and the LLM answers the k most
likely of them (``{"mechanism", "side_effects"}``, parsed by :func:`ddibench.toolkit.label_choice.answer_to_ranking`);
sampling keeps K-medoids per side effect, and refinement rewrites a case's insight when its answer names
none of the case's side effects.

``lam`` is chosen on validation pairs when not given: the value whose top-K retrieved cases carry the
query's own label most often (no LLM answer is needed for that); every query's trace records the labels its top-K
cases would carry at each lam of the grid, which ``report --ceilings`` reads as coverage by lam. Every ablation of the paper is a
switch: ``use_cases``, ``use_paths``, ``use_candidates``, ``lam=1`` (semantic only), ``lam=0``
(structural only), ``sampling``, ``k_cases``, ``answer="gnn"`` (the GNN module alone), and ``answer="cases"``
(retrieval alone: the label the top-K cases carry most often, cases without insights). A switch builds only
what the run then uses: without cases no repository is built or loaded and no ``lam`` chosen; without paths none
is extracted, for the cases or the queries; the GNN module alone answers its top candidate (its top k on
label-set tasks) with no generator and no repository: it still needs the describer for its description
features, and with ``gnn_features="morgan"`` the run starts no model.

``run_info()["phases"]`` times every phase the run went through, in order: its start (Unix time), wall and
process CPU seconds (``benchmarks/paper_scale.py`` reads them), and under ``llm`` what each model role spent in it:
calls, prompt tokens sent, of them reused from the server's prefix cache, generated tokens and seconds waited
(``benchmarks/headline.py`` reads them); the queries' phase runs from the first ``predict`` call to the last one's
return.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import Callable, Coroutine, Iterable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import replace
from functools import cache, partial
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, ClassVar, Literal, TypeVar

import numpy as np
from pydantic import Field

from ddibench import families
from ddibench.errors import DataError
from ddibench.hashing import sha256_text, stable_json
from ddibench.llm import ChatRequest, ChatResult
from ddibench.schema import Drug, DrugPair, Prediction, Sample
from ddibench.system import (
    BaseSystem,
    Phase,
    PlanContext,
    RunContext,
    SystemConfig,
    TrainingView,
    llm_trace,
    system_config_hash,
)
from ddibench.systems.cbr_ddi import prompts
from ddibench.systems.cbr_ddi.repository import Case, LeaveOneOut, Repository, normalise, representative_sample
from ddibench.toolkit.label_choice import (
    OptionSeed,
    answer_to_prediction,
    answer_to_ranking,
    choice_count,
    label_schema,
    option_texts,
    topk_schema,
)

if TYPE_CHECKING:
    from ddibench.llm import RoleUsage, UsageLedger
    from ddibench.systems.emergnn import EmerGNNSystem

REPOSITORY_RECIPE = 1
TEXT_VECTORS_RECIPE = 1  # the stored embeddings of a whole list of texts (see _embed_stored)
CANDIDATE_TIE = 1e-4  # GNN probabilities this close may order otherwise in another batch's forward (see _refine)
REFINE_RETRIEVAL_CHUNK = 256  # cases of the refinement pass retrieved for in one product
DESCRIBE_SEED = 0  # the seed of every describer request, whatever the run's (see describe_request)
T = TypeVar("T")


class CBRDDIConfig(SystemConfig):
    # the training pairs the repository is built from: a seeded random draw of this many (None: the whole training
    # split, the paper's pool; 0: an empty repository)
    repository_size: int | None = Field(2000, ge=0)
    # in place of that random draw, a seeded draw per interaction type (one-label tasks): up to this many cases of
    # every type (all of a type the split has fewer of), or "share": the counts the paper's sampling keeps of every
    # type (max(min_per_class, sampling_ratio x the type's training cases)), drawn at random instead of by K-medoids
    repository_per_type: Annotated[int, Field(gt=0)] | Literal["share"] | None = None
    k_cases: int = Field(5, ge=0)
    p_paths: int = Field(5, ge=0)
    n_candidates: int = Field(3, gt=0)  # paper: 3 for DrugBank; on label-set tasks (TWOSIDES) 10 unless given
    lam: float | None = None  # None: chosen on validation from lambda_grid
    lambda_grid: tuple[float, ...] = (0.0, 0.25, 0.5, 0.75, 1.0)
    lambda_valid_pairs: int | None = Field(200, gt=0)  # None: every validation pair
    use_cases: bool = True
    use_paths: bool = True
    use_candidates: bool = True
    sampling: bool = True
    sampling_ratio: float = Field(0.05, gt=0, le=1)
    min_per_class: int = Field(10, ge=0)
    refine: bool = True
    refine_cases: int | None = Field(None, ge=0)  # budget: cases checked by the refinement pass (None: all)
    encoder: str = "minilm"
    encoder_device: str = "cpu"  # where the text encoder runs ("cuda" on the GPU profiles)
    temperature: float = Field(0.0, ge=0, allow_inf_nan=False)
    description_tokens: int = Field(128, gt=0)
    insight_tokens: int = Field(160, gt=0)
    answer_tokens: int = Field(160, gt=0)
    # list each query's candidates in an order drawn from this seed and the pair (None: the GNN's order, most
    # likely first); answers are mapped back. Candidates are per query, so the order can be too.
    shuffle_options: OptionSeed = None
    gnn: dict[str, Any] = Field(default_factory=dict)  # EmerGNN options on top of the profile's EmerGNN budget
    # "llm": the LLM answers from the prompt; "gnn": the GNN module alone answers its top candidate (top k on label
    # sets), in its own order: no generator, no repository (the paper's GNN-only row); the describer only for the
    # GNN's description features; "cases": retrieval alone, the label the top-K retrieved cases carry most often
    # (ties: the better-ranked case's), with no LLM answer and cases holding no insight (none written, none refined,
    # no K-medoids over insights): it measures the repository and lam, and needs only the describer
    answer: Literal["llm", "gnn", "cases"] = "llm"
    # the GNN module's drug features: "descriptions", the paper's (Algorithm 1: h0 = f(D_u), the text encoder's
    # embedding of the describer's description of every drug of the catalogue), or "morgan" (EmerGNN's own Morgan
    # fingerprints, what every run recorded before this key did)
    gnn_features: Literal["descriptions", "morgan"] = "descriptions"
    # runs recorded before them keep theirs
    added_keys: ClassVar[tuple[str, ...]] = ("answer", "repository_per_type", "encoder_device")
    absent_means: ClassVar[dict[str, Any]] = {"gnn_features": "morgan"}  # (recorded in every run since)


class CBRDDISystem(BaseSystem):
    name = "cbr-ddi"
    version = "1.0.0"
    description = "case-based reasoning: LLM drug descriptions, GNN paths, mechanistic insights, hybrid case retrieval"
    paper = "Liu et al. 2025, case-based reasoning for DDI prediction (CBR-DDI), arXiv 2505.23034, https://arxiv.org/abs/2505.23034"
    Config = CBRDDIConfig
    families = (families.DRUGBANK_DDI, families.TWOSIDES)
    llm_roles = ("generator", "describer")
    # descriptions, insights and revised insights: about 100 tokens written from a short prompt (a query is about
    # 2,400 prompt tokens and a short answer), so on the embedded server the describer fills its slots
    generation_roles = ("describer",)
    # queries per predict() call: their GNN forward and text embeddings are computed together, then their calls
    # go out (benchmarks/paper_scale.py --latency 0.5; docs/paper-scale.md)
    batch_size = 16
    # queries in flight at once, up to the run's concurrency (the profile's: 64 on h100-80g); each query is one
    # generator call after its own CPU work, so at 8 a served model was kept at most 8/64 busy
    # (benchmarks/paper_scale.py --latency 0.5)
    max_concurrency = 64
    # an option order, and the paper's ablations (Table 3): a run without a component is shown apart from the full system
    variant_keys = (
        "shuffle_options",
        "use_cases",
        "use_paths",
        "use_candidates",
        "answer",
        "gnn_features",
        "lam",
        "sampling",
        "k_cases",
    )
    config: CBRDDIConfig

    def __init__(self, config: CBRDDIConfig | None = None) -> None:
        super().__init__(config)
        self._descriptions: dict[tuple[int, str], str] = {}
        self.repository: Repository | None = None
        self.lam = 0.5
        self.k: int | None = None  # labels to answer: None for one interaction type, k for a label set
        self.n_candidates = self.config.n_candidates
        self.info: dict[str, Any] = {}  # what run_info reports besides the counters
        self._queries: dict[str, Any] | None = None  # the queries' phase, grown by every predict() call
        self._ledger: UsageLedger | None = None  # the run's LLM usage, read at phase boundaries
        # when the first predict() call started: (time, perf_counter, process_time, LLM usage then)
        self._query_start: tuple[float, float, float, dict[str, RoleUsage]] | None = None

    @classmethod
    def used_roles(cls, config: SystemConfig) -> tuple[str, ...]:
        """The describer (descriptions, insights) and the generator; the GNN module alone calls the describer only
        when its features are the drugs' descriptions, and no LLM with Morgan features."""
        if isinstance(config, CBRDDIConfig) and config.answer == "gnn":
            return ("describer",) if config.gnn_features == "descriptions" else ()
        if isinstance(config, CBRDDIConfig) and config.answer == "cases":  # descriptions for retrieval, no answer
            return ("describer",)
        return cls.llm_roles

    @property
    def _describes_catalogue(self) -> bool:
        """Whether the GNN module's features are the descriptions of every drug of the catalogue."""
        return self.config.gnn_features == "descriptions"

    @property
    def _uses_llm(self) -> bool:
        return self.config.answer == "llm"

    @property
    def _uses_cases(self) -> bool:
        """Whether the run builds (or loads) the repository and retrieves from it."""
        return self.config.answer != "gnn" and self.config.use_cases

    @property
    def _writes_insights(self) -> bool:
        """Whether the repository's cases get insights (and refinement and K-medoids sampling over them): not when
        retrieval alone answers."""
        return self._uses_llm

    def _check_config(self) -> None:
        """Switches that cannot go together, named before anything is built."""
        from ddibench.errors import ConfigError

        cfg = self.config
        if cfg.answer == "cases":
            if not cfg.use_cases:
                raise ConfigError(
                    "cbr-ddi answer=cases answers from the retrieved cases, and use_cases=false retrieves none",
                    "drop one of -C answer=cases and -C use_cases=false",
                )
            named = [k for k in ("refine", "sampling") if k in cfg.model_fields_set and getattr(cfg, k)]
            if named:
                raise ConfigError(
                    f"cbr-ddi answer=cases writes no insights, so there is nothing to {' or '.join(named)} "
                    "(refinement rewrites insights; the sampling clusters them)",
                    f"drop -C {named[0]}=true, or answer with the LLM",
                )
        if cfg.repository_per_type is not None and self.k is not None:
            raise ConfigError(
                "cbr-ddi repository_per_type draws cases per interaction type, and this task's pairs carry label sets",
                "use -C repository_size=N on a label-set task",
            )

    def run_info(self) -> dict[str, Any]:
        return {"counters": self.counters.as_dict(), **self.info}

    @contextmanager
    def _phase(self, name: str) -> Iterator[None]:
        """Times one phase of the run into ``info["phases"]``: its start, wall and process CPU seconds."""
        at, wall, cpu = time.time(), time.perf_counter(), time.process_time()
        usage = self._ledger.snapshot() if self._ledger is not None else {}
        try:
            yield
        finally:
            self.info.setdefault("phases", []).append(
                {
                    "phase": name,
                    "started_at": round(at, 3),
                    "wall_s": round(time.perf_counter() - wall, 3),
                    "cpu_s": round(time.process_time() - cpu, 3),
                    "llm": self._ledger.since(usage) if self._ledger is not None else {},
                }
            )

    def _query_phase(self) -> None:
        """Grows the queries' phase to the end of a predict() call: the phase runs from the first call's start (its
        clocks and LLM usage kept in ``_query_start``; calls run concurrently, so the first to start is not the first
        to return) to the last call's return."""
        assert self._query_start is not None  # set by the predict() call that ends here
        at, wall, cpu, usage = self._query_start
        if self._queries is None:
            self._queries = {"phase": "queries", "started_at": round(at, 3)}
            self.info.setdefault("phases", []).append(self._queries)
        self._queries["wall_s"] = round(time.perf_counter() - wall, 3)
        self._queries["cpu_s"] = round(time.process_time() - cpu, 3)
        self._queries["llm"] = self._ledger.since(usage) if self._ledger is not None else {}

    def deviations(self) -> list[str]:
        out = []
        if self.config.answer == "cases":
            out.append(
                "the answer is the label the top-K retrieved cases carry most often, with no LLM answer; the cases "
                "hold no insight (none written or refined) and the repository is its drawn pool (no K-medoids "
                "sampling over insights): retrieval alone, not the paper's method"
            )
        if self.config.repository_per_type is not None:
            per = self.config.repository_per_type
            out.append(
                "the repository's pool is a seeded random draw per interaction type ("
                + (f"up to {per} cases of each" if per != "share" else "the counts the paper's sampling keeps")
                + "), not the whole training split"
            )
        if self.config.answer == "gnn":
            out.append(
                "the answer is the GNN module's top candidate (its top k on label-set tasks) with no LLM answer "
                "and no cases: the paper's GNN-only ablation, not its full method"
            )
        if self._uses_cases and self.config.lam is None:
            out.append(
                "lam is chosen on validation pairs by how often the top-K retrieved cases carry the pair's own label "
                "(a retrieval proxy needing no LLM answers), not by the LLM's validation accuracy"
            )
        if self.config.gnn_features == "morgan":
            out.append(
                "the GNN module's drug features are EmerGNN's own (Morgan fingerprints on S1/S2, learned embeddings "
                "on S0), not the paper's embeddings of the LLM's drug descriptions (h0 = f(D_u))"
            )
        if self._uses_cases or self._describes_catalogue:
            encoder = "MiniLM (all-MiniLM-L6-v2)" if self.config.encoder == "minilm" else self.config.encoder
            uses = "the descriptions for case retrieval" if self._uses_cases else ""
            if self._describes_catalogue:
                uses += (" and " if uses else "") + "the descriptions the GNN module's drug features are made of"
            out.append(f"the text encoder f is {encoder}, in place of the paper's encoder: it embeds {uses}")
        return out + [
            "the GNN module is ddibench's EmerGNN (see its deviations), trained under the run's profile budget"
        ]

    # -- components ----------------------------------------------------------------------------

    async def describe(self, drug: Drug, ctx: RunContext, traces: list[dict[str, Any]] | None = None) -> str:
        """The drug's description (kept for the prompts that show it)."""
        return (await self._describe(drug, ctx, traces)).text

    async def _describe(self, drug: Drug, ctx: RunContext, traces: list[dict[str, Any]] | None = None) -> ChatResult:
        """The describer's answer for the drug; its text, whitespace collapsed, is kept as the description."""
        key = (drug.node_id, drug.name)
        request = self.describe_request(drug)
        result = await ctx.model("describer").ask(request)
        if traces is not None:
            traces.append(llm_trace("describer", list(request.messages), result))
        self._descriptions[key] = " ".join(result.text.split())
        return replace(result, text=self._descriptions[key])

    def describe_request(self, drug: Drug) -> ChatRequest:
        """The describer's call for one drug, as the run makes it and the plan looks it up in the response cache.
        Its seed is fixed: a drug's description (greedy, temperature 0) is an input every run of a model shares,
        while the run's seed draws the repository and the validation pairs and trains the GNN; with the run's seed
        in the request, and so in the response cache's key, a second seed described the whole catalogue again
        (two hours of the 1.5B on 2 cores)."""
        return ChatRequest(
            (
                {"role": "system", "content": prompts.DESCRIBE_SYSTEM},
                {"role": "user", "content": self.describe_prompt(drug)},
            ),
            temperature=0.0,
            max_tokens=self.config.description_tokens,
            seed=DESCRIBE_SEED,
        )

    @staticmethod
    def describe_prompt(drug: Drug) -> str:
        """The describer's request for one drug (by name, and DrugBank id where it has one)."""
        if drug.drugbank_id:
            return prompts.DESCRIBE.format(name=drug.name, drugbank_id=drug.drugbank_id)
        return prompts.DESCRIBE_NO_ID.format(name=drug.name)

    def _pair_text(self, head: Drug, tail: Drug, head_description: str, tail_description: str) -> str:
        return f"{head.name}: {head_description} {tail.name}: {tail_description}"

    def interaction(self, target: Any, head: str, tail: str) -> str:
        """A case's label as a sentence: the interaction type, or the pair's side effects."""
        if isinstance(target, (tuple, list)):
            return prompts.side_effects_text([self._labels[k].name for k in target])
        return self._labels[target].render(head, tail)

    @staticmethod
    def _target(case: Case) -> Any:
        return tuple(case.labels) if case.labels is not None else case.label

    async def prepare(self, view: TrainingView, ctx: RunContext) -> None:
        self._ledger = ctx.llm.ledger if ctx.llm is not None else None
        if self._uses_cases or self._uses_llm or self._describes_catalogue:
            self._read_task(view)
        else:  # the GNN module alone on Morgan features: no text encoder, no prompt
            self.read_labels(view)
        self._check_config()
        if self._uses_llm:
            ctx.remember_text(self.predict_system)
        await self._prepare_gnn(view, ctx)
        if self._uses_cases:  # without cases no repository is built, loaded or refined, and no lam chosen
            await self._load_repository(view, ctx, self._repository_key(view, ctx))
            if self.config.lam is not None:
                self.lam = self.config.lam
            else:
                with self._phase("choice of lambda"):
                    self.lam = await self._choose_lambda(view, ctx)
        if self.k is not None:
            self.info["label_sets"] = {"k": self.k, "n_candidates": self.n_candidates}

    def plan(self, view: TrainingView, samples: Sequence[Sample], ctx: PlanContext) -> list[Phase]:
        """The run's phases, counted without running them (see :mod:`ddibench.systems.cbr_ddi.plan`)."""
        from ddibench.systems.cbr_ddi.plan import plan_phases

        return plan_phases(self, view, samples, ctx)

    def _read_task(self, view: TrainingView) -> None:
        """Takes the task's labels, drugs and answer shape (:meth:`read_labels`) and the text encoder."""
        from ddibench.embeddings import shared_encoder

        self.read_labels(view)
        self._encoder = shared_encoder(self.config.encoder, self.config.encoder_device)

    def read_labels(self, view: TrainingView) -> None:
        """Takes the task's labels, drugs and answer shape (one type, or k of a label set) and the query prompt."""
        self._labels = view.task.label_space
        self._setting = view.task.setting
        self._drugs = view.resources["drugs"].drugs
        self.k = choice_count(view.task)
        if self.k is None:
            self._options = option_texts(self._labels)
            self.predict_system = prompts.PREDICT_SYSTEM
        else:
            self._options = [lb.name for lb in self._labels]
            self.predict_system = prompts.PREDICT_SYSTEM_TOPK.format(k=self.k)
            if "n_candidates" not in self.config.model_fields_set:
                self.n_candidates = 10  # the paper's N for TWOSIDES

    def gnn_module(self, view: TrainingView, ctx: RunContext | PlanContext) -> EmerGNNSystem:
        """The GNN module: EmerGNN under the profile's budget for this task (the one the EmerGNN system gets on it:
        S2 and TWOSIDES need more epochs than S1); its prediction graph holds training interactions only. With
        description features its drug features are external: :meth:`prepare` gives them before it trains."""
        from ddibench.errors import ConfigError
        from ddibench.systems.emergnn import EmerGNNSystem

        if self._describes_catalogue and "feature" in self.config.gnn:
            raise ConfigError(
                "cbr-ddi gnn_features=descriptions sets the GNN module's features, and gnn names a feature too",
                "drop 'feature' from -C gnn=..., or use -C gnn_features=morgan",
            )
        gnn_options = {
            **ctx.profile.budget_for("emergnn", view.task.name),
            **self.config.gnn,
            **({"feature": "external"} if self._describes_catalogue else {}),
            "predict_facts": "train",
            "explain_paths": 0,
        }
        gnn = EmerGNNSystem.build(gnn_options)
        assert isinstance(gnn, EmerGNNSystem)
        return gnn

    async def _prepare_gnn(self, view: TrainingView, ctx: RunContext) -> None:
        """Trains (or loads) the GNN module, on the drugs' embedded descriptions where those are its features, and
        records its training log."""
        self.gnn = self.gnn_module(view, ctx)
        if self._describes_catalogue:
            features = await self.node_features(ctx)
            self.gnn.use_node_features(features)
        with self._phase("GNN training"):
            await self.gnn.prepare(view, ctx)
        self.info["gnn"] = {k: v for k, v in self.gnn.training_log.items() if k != "epochs"}
        if self._describes_catalogue:
            self.info["gnn"]["node_features"] = {
                "kind": "descriptions",
                "drugs": int(features.shape[0]),
                "dim": int(features.shape[1]),
                "encoder": self._encoder.identity,
                "sha256": self.gnn.node_features_sha256(),
            }

    async def node_features(self, ctx: RunContext) -> np.ndarray:
        """The GNN module's drug features, the paper's h0 = f(D_u): the text encoder's unit-length embedding of the
        describer's description of every drug of the task's catalogue, one row per node id."""
        with self._phase("catalogue descriptions"):
            await self._describe_all(self._drugs, ctx, "describing every drug (the GNN module's features)")
        with self._phase("catalogue embeddings"):
            return self._embed_stored([self._description(d) for d in self._drugs], ctx, "catalogue")

    def _repository_key(self, view: TrainingView, ctx: RunContext) -> dict[str, Any]:
        """The artifact key of the knowledge repository: everything its cases depend on."""
        # the options its cases depend on, not the whole configuration: answer-side options share the repository
        key = self.artifact_key(
            view.task,
            ctx.seed,
            whole_config=False,
            recipe=REPOSITORY_RECIPE,
            config={
                k: getattr(self.config, k)
                for k in (
                    "repository_size",
                    "p_paths",
                    "sampling",
                    "sampling_ratio",
                    "min_per_class",
                    "refine",
                    "refine_cases",
                    "k_cases",
                    "n_candidates",
                    "use_cases",
                    "use_paths",
                    "use_candidates",
                    "encoder",
                    "temperature",
                    "description_tokens",
                    "insight_tokens",
                    "answer_tokens",
                )
            },
            models=ctx.llm.identities(list(self.used_roles(self.config))) if ctx.llm else {},
            encoder=self._encoder.identity,
            gnn=system_config_hash(self.gnn),
            gnn_artifact=self.gnn.training_log.get("artifact", ""),
        )
        if self.k is not None:  # (DrugBank keys stay as they were)
            key["label_sets"] = {"k": self.k, "n_candidates": self.n_candidates}
        if self.config.repository_per_type is not None:  # (and so do the keys of random draws)
            key["repository_per_type"] = self.config.repository_per_type
        if not self._writes_insights:
            key["insights"] = False
        return key

    async def _load_repository(self, view: TrainingView, ctx: RunContext, key: dict[str, Any]) -> None:
        """Loads the repository stored under ``key``, building and storing it first when there is none."""
        found = ctx.artifacts.get("cbr-ddi-repository", key)
        if found is None:
            scratch = ctx.artifacts.scratch("cbr-ddi-repository", key)
            repo = await self._build_repository(view, ctx)
            with self._phase("repository save"):
                repo.save(scratch)
                found = ctx.artifacts.put("cbr-ddi-repository", key, scratch)
            self.info["repository_built"] = True
        else:
            self.info["repository_built"] = False
        self.repository = Repository.load(found)
        self.info["repository"] = {**self.repository.info, "cases": len(self.repository), "artifact": str(found)}

    async def _describe_all(self, drugs: Sequence[Drug], ctx: RunContext, label: str) -> None:
        todo = [d for d in dict.fromkeys(drugs) if (d.node_id, d.name) not in self._descriptions]
        bar = ctx.progress.task(label, len(todo))

        async def one(drug: Drug) -> None:
            result = await self._describe(drug, ctx)
            bar.advance(cached=result.cached)

        try:
            await asyncio.gather(*(one(d) for d in todo))
        finally:
            bar.close()

    def _description(self, drug: Drug) -> str:
        return self._descriptions[(drug.node_id, drug.name)]

    def _gnn(
        self, pairs: Sequence[DrugPair], hide_own: bool, paths: bool
    ) -> tuple[np.ndarray, np.ndarray, list[list[str] | None]]:
        """The pairs' GNN probabilities, pair representations and, with ``paths``, each pair's top paths verbalised
        (None for every pair without them, or when the config uses no paths), from one forward per batch
        (``EmerGNN.encode_explained``: the paths are those the pair alone would get). Counts nothing, so it may
        run off the loop."""
        heads, tails = [p.head.node_id for p in pairs], [p.tail.node_id for p in pairs]
        if not paths or not self.config.use_paths or self.config.p_paths <= 0:
            probs, reprs = self.gnn.encode(heads, tails, self._setting, hide_own=hide_own)
            return probs, reprs, [None] * len(pairs)
        probs, reprs, found = self.gnn.encode_explained(
            heads, tails, self._setting, self.config.p_paths, hide_own=hide_own
        )
        return probs, reprs, [[p["text"] for p in f] for f in found]

    def _counted(self, found: list[str] | None) -> list[str]:
        if found is None:
            return []
        if not found:
            self.count("pairs_without_paths")
        return found

    def _embed(self, texts: list[str]) -> np.ndarray:
        """Unit-length text embeddings, one row per text (an empty ``(0, dim)`` array for no texts)."""
        if not texts:
            return np.zeros((0, self._encoder.dim), dtype=np.float32)
        return normalise(self._encoder.encode(texts))

    def _embed_stored(self, texts: list[str], ctx: RunContext, what: str) -> np.ndarray:
        """:meth:`_embed` of a list of texts a run embeds whole and every run the same (the catalogue's descriptions,
        the validation pairs' texts for lam), kept in the artifact store under the encoder's identity and the
        texts' hash: a later run with the same texts reads the vectors this one computed instead of running the
        encoder again (on 2 cores ~45 s for the 1,710 descriptions, ~100 s for 1,606 validation texts). A list is
        stored whole, never text by text: a text's vector rounds by the batch it was encoded in, so a whole list
        read back is the list as one cold run encodes it. Recorded in ``info["text_vectors"]``."""
        key = {
            "system": self.name,
            "recipe": TEXT_VECTORS_RECIPE,
            "encoder": self._encoder.identity,
            "texts": len(texts),
            "texts_sha256": sha256_text(stable_json(texts)),
        }

        def build(folder: Path) -> None:
            np.save(folder / "vectors.npy", self._embed(texts))

        found, built = ctx.artifacts.get_or_build("cbr-ddi-text-vectors", key, build)
        vectors = np.load(found / "vectors.npy")
        if vectors.shape[0] != len(texts):
            raise DataError(
                f"stored text vectors {found} hold {vectors.shape[0]} rows for {len(texts)} texts",
                f"delete {found} and run again",
            )
        self.info.setdefault("text_vectors", {})[what] = {"texts": len(texts), "built": built, "artifact": str(found)}
        return vectors

    @staticmethod
    def _seeded_subset(samples: Sequence[Sample], size: int | None, rng: np.random.Generator) -> list[Sample]:
        """``size`` of the samples drawn by ``rng``, in their original order (all of them when there are no more,
        or ``size`` is None)."""
        chosen = list(samples)
        if size is not None and size < len(chosen):
            chosen = [chosen[i] for i in np.sort(rng.choice(len(chosen), size, replace=False))]
        return chosen

    def repository_pairs(self, view: TrainingView, rng: np.random.Generator) -> list[Sample]:
        """The training pairs the repository is built from (``rng`` seeded with the run's seed): a random draw of
        ``repository_size``, or with ``repository_per_type`` a draw within each interaction type, in the split's
        order either way."""
        per = self.config.repository_per_type
        if per is None:
            return self._seeded_subset(view.train, self.config.repository_size, rng)
        by_type: dict[int, list[int]] = {}
        for i, sample in enumerate(view.train):
            by_type.setdefault(sample.label, []).append(i)
        kept: list[int] = []
        for label in sorted(by_type):  # a fixed order of types: the draw depends on the seed and the split only
            members = by_type[label]
            n = len(members)
            want = (
                per if per != "share" else max(self.config.min_per_class, int(np.ceil(self.config.sampling_ratio * n)))
            )
            kept += members if want >= n else [members[j] for j in rng.choice(n, want, replace=False)]
        return [view.train[i] for i in sorted(kept)]

    def lambda_pairs(self, view: TrainingView, rng: np.random.Generator) -> list[Sample]:
        """The validation pairs that choose ``lam`` (``rng`` seeded with the run's seed + 1)."""
        return self._seeded_subset(view.valid, self.config.lambda_valid_pairs, rng)

    async def _build_repository(self, view: TrainingView, ctx: RunContext) -> Repository:
        cfg = self.config
        started = time.perf_counter()
        rng = np.random.default_rng(ctx.seed)
        chosen = self.repository_pairs(view, rng)
        with self._phase("case drug descriptions"):
            drugs = [d for s in chosen for d in (s.pair.head, s.pair.tail)]
            await self._describe_all(drugs, ctx, "describing case drugs")
        with self._phase("case pair representations (GNN)"):  # and, for the insights, the cases' paths
            case_probs, reprs, found = (
                self._gnn([s.pair for s in chosen], hide_own=True, paths=self._writes_insights)
                if chosen
                else (None, np.zeros((0, 2 * 64)), [])
            )
        with self._phase("insights" if self._writes_insights else "cases (no insights)"):
            cases = await self._make_cases(chosen, found, ctx, insights=self._writes_insights)
        with self._phase("case embeddings"):
            texts = [
                self._pair_text(self._drugs[c.head], self._drugs[c.tail], c.head_description, c.tail_description)
                for c in cases
            ]
            repo = Repository(
                cases,
                self._embed(texts),
                normalise(reprs),
                self._embed([c.insight or prompts.NO_INSIGHT for c in cases]),
            )
        info: dict[str, Any] = {"built_from": len(chosen), "empty_insights": sum(not c.insight for c in cases)}
        if cfg.repository_per_type is not None:
            info["draw"] = {"per_type": cfg.repository_per_type}
        if not self._writes_insights:
            info["insights"] = "none: retrieval alone answers (answer=cases), so no refinement and no sampling"
        if cfg.refine and cases and self._writes_insights:
            with self._phase("refinement"):
                info["refinement"] = await self._refine(repo, ctx, rng, case_probs)
        if cfg.sampling and cases and self._writes_insights:
            with self._phase("K-medoids sampling"):
                keep, per_class = representative_sample(repo, cfg.sampling_ratio, cfg.min_per_class, rng)
            info["sampling"] = {"kept": int(keep.size), "of": len(cases), "per_class": per_class}
            repo = repo.subset(keep)
        if self.k is None:  # the interaction types the repository's cases cover
            info["types"] = len({c.label for c in repo.cases})
        info["build_seconds"] = round(time.perf_counter() - started, 1)
        repo.info = info
        return repo

    async def _make_cases(
        self, chosen: Sequence[Sample], found: Sequence[list[str] | None], ctx: RunContext, insights: bool = True
    ) -> list[Case]:
        """One case per training pair, in order: descriptions, paths (``found``, the pair's own edge hidden; none
        without insights, when no prompt shows them), insight (empty when ``insights`` is False: no LLM call)
        and label.

        The paths were found for all the cases in the GNN's batches (``_gnn``), so a case's own work here is its
        prompt; the cases still start one after another, the event loop reading the answers in between. Each
        case's paths were once found here, an EmerGNN forward apiece: gathered, that CPU work ran in one turn of
        the loop before any answer was read, and the requests already sent were cut as stalled (64 timeouts at
        200 cases, the endpoint's limit falling to one). An insight's prompt depends on its own case alone, so
        the order does not change the cases."""
        bar = ctx.progress.task("writing case insights" if insights else "making cases (no insights)", len(chosen))

        async def make(sample: Sample, paths: list[str]) -> Case:
            pair = sample.pair
            labels = list(sample.label_ids) if isinstance(sample.target, tuple) else None
            label = labels[0] if labels else sample.label
            text = ""
            if insights:
                result = await self._insight(pair.head, pair.tail, sample.target, paths, ctx)
                text = prompts.clean_insight(result.text)
            bar.advance(cached=result.cached if insights else True)
            return Case(
                pair.head.node_id,
                pair.tail.node_id,
                label,
                self._description(pair.head),
                self._description(pair.tail),
                paths,
                text,
                sample_id=sample.id,
                labels=labels,
            )

        def paths(i: int) -> list[str]:
            return self._counted(found[i]) if insights else []

        try:
            return await _one_after_another(make(sample, paths(i)) for i, sample in enumerate(chosen))
        finally:
            bar.close()

    async def _insight(self, head: Drug, tail: Drug, label: Any, paths: list[str], ctx: RunContext) -> ChatResult:
        messages = [
            {"role": "system", "content": prompts.INSIGHT_SYSTEM},
            {
                "role": "user",
                "content": prompts.INSIGHT.format(
                    head=head.name,
                    tail=tail.name,
                    head_description=self._description(head),
                    tail_description=self._description(tail),
                    paths=prompts.paths_block(paths),
                    interaction=self.interaction(label, head.name, tail.name),
                ),
            },
        ]
        return await ctx.model("describer").chat(
            messages, temperature=self.config.temperature, max_tokens=self.config.insight_tokens, seed=ctx.seed
        )

    async def _refine(
        self, repo: Repository, ctx: RunContext, rng: np.random.Generator, case_probs: np.ndarray | None = None
    ) -> dict[str, int]:
        """Answer cases leave-one-out; rewrite the insight of each case answered wrongly.

        A case's candidates come from its probabilities in the cases' batched GNN forward (``case_probs``, own
        edge hidden, as here) where :meth:`_candidates_separated` says no rounding can reorder them, else from a
        forward of the pair alone, as every case's once did (most of the pass's CPU).

        Every answer's prompt shows the retrieved cases' insights as they stood before the pass (``shown``), as
        when all the prompts were built in one turn of the event loop. They are now built one case after another,
        the loop reading the answers in between: built all at once, every case's CPU work (a GNN forward, a
        retrieval) ran before any answer was read, and the first requests were cut as stalled and sent again
        (64 timeouts at 200 cases, the endpoint's limit falling to one). A rewrite during the pass changes only
        its own case, which the prompts built after it do not show."""
        order = rng.permutation(len(repo))
        shown = [case.insight for case in repo.cases]
        if self.config.refine_cases is not None:
            order = order[: self.config.refine_cases]
        stats = {"checked": 0, "wrong": 0, "rewritten": 0, "candidates_alone": 0}
        bar = ctx.progress.task("refining cases", len(order))
        retrieved = (
            LeaveOneOut(repo, order, self.config.k_cases, self.lam, REFINE_RETRIEVAL_CHUNK)
            if self.config.use_cases
            else None
        )

        async def check(position: int, i: int) -> None:
            case = repo.cases[i]
            head, tail = self._drugs[case.head], self._drugs[case.tail]
            probs = None if case_probs is None else case_probs[i]
            if probs is None or not self._candidates_separated(probs):  # (a near-tie: the pair alone)
                probs = self.gnn.encode([case.head], [case.tail], self._setting, hide_own=True)[0][0]
                stats["candidates_alone"] += 1
            found = None if retrieved is None else retrieved.at(position)
            result, labels, _ = await self._answer(
                ctx, head, tail, probs, repo.text[i], repo.pair[i], case.paths, repo, i, False, shown, found
            )
            stats["checked"] += 1
            right, predicted = self._judged(case, result, labels, head, tail)
            if right:
                bar.advance(cached=result.cached)
                return
            stats["wrong"] += 1
            revised = await ctx.model("describer").chat(
                self._refine_messages(case, head, tail, predicted),
                temperature=self.config.temperature,
                max_tokens=self.config.insight_tokens,
                seed=ctx.seed,
            )
            text = prompts.clean_insight(revised.text)
            if text != case.insight:
                case.insight, case.refined = text, True
                repo.insight[i] = self._embed([text or prompts.NO_INSIGHT])[0]
                stats["rewritten"] += 1
            bar.advance(cached=result.cached and revised.cached)

        try:  # each check runs its CPU work up to its call in a turn of the loop of its own
            await _one_after_another(check(position, int(i)) for position, i in enumerate(order))
        finally:
            bar.close()
        return stats

    def _judged(self, case: Case, result: ChatResult, labels: list[int], head: Drug, tail: Drug) -> tuple[bool, str]:
        """Whether the refinement's answer for ``case`` is right, and the interaction it predicted as the rewrite
        request states it (a label set's answer is wrong when it names none of the case's side effects)."""
        if self.k is None:
            pred = answer_to_prediction(case.sample_id, result, self._option_subset(labels), labels, {})
            right = pred.valid and pred.label == case.label
            return right, self.interaction(pred.label, head.name, tail.name) if pred.valid else "no valid answer"
        ranked = answer_to_ranking(case.sample_id, result, self._option_subset(labels), labels, self.k, {})
        right = ranked.valid and bool(set(ranked.ranked or ()) & set(case.labels or ()))
        return right, self.interaction(ranked.ranked, head.name, tail.name) if ranked.valid else "no valid answer"

    def _refine_messages(self, case: Case, head: Drug, tail: Drug, predicted: str) -> list[dict[str, str]]:
        """The request to rewrite a case's insight after its wrong answer ``predicted``."""
        refine = prompts.REFINE.format(
            head=head.name,
            tail=tail.name,
            head_description=case.head_description,
            tail_description=case.tail_description,
            paths=prompts.paths_block(case.paths),
            insight=case.insight or prompts.NO_INSIGHT,
            predicted=predicted,
            interaction=self.interaction(self._target(case), head.name, tail.name),
        )
        return [{"role": "system", "content": prompts.INSIGHT_SYSTEM}, {"role": "user", "content": refine}]

    async def _choose_lambda(self, view: TrainingView, ctx: RunContext) -> float:
        """The lam whose top-K retrieved cases most often carry the validation pair's own label."""
        repo = self.repository
        grid = list(self.config.lambda_grid)
        if repo is None or not len(repo) or not view.valid:
            self.info["lambda"] = {"chosen": 0.5, "reason": "no repository or no validation pairs"}
            return 0.5
        rng = np.random.default_rng(ctx.seed + 1)
        valid = self.lambda_pairs(view, rng)
        await self._describe_all(
            [d for s in valid for d in (s.pair.head, s.pair.tail)], ctx, "describing validation drugs"
        )
        _, reprs = self.gnn.encode(
            [s.pair.head.node_id for s in valid], [s.pair.tail.node_id for s in valid], self._setting, graph="valid"
        )
        texts = self._embed_stored(
            [
                self._pair_text(
                    s.pair.head, s.pair.tail, self._description(s.pair.head), self._description(s.pair.tail)
                )
                for s in valid
            ],
            ctx,
            "validation pairs",
        )
        pairs = normalise(reprs)
        labels = np.array([c.label for c in repo.cases])
        table = {}
        for lam in grid:
            # all validation pairs in one pass
            retrieved = [top for top, _ in repo.retrieve_many(texts, pairs, self.config.k_cases, lam)]
            if self.k is None:
                hits = [float(np.mean(labels[top] == s.label)) for top, s in zip(retrieved, valid)]
            else:  # label sets: the share of the pair's side effects a retrieved case carries, averaged
                hits = [
                    float(
                        np.mean(
                            [len(set(repo.cases[j].labels or ()) & set(s.label_ids)) / len(s.label_ids) for j in top]
                            or [0.0]
                        )
                    )
                    for top, s in zip(retrieved, valid)
                ]
            table[str(lam)] = round(float(np.mean(hits)), 4)
        best = max(grid, key=lambda lam: (table[str(lam)], -abs(lam - 0.5)))
        self.info["lambda"] = {
            "chosen": best,
            "label_hit_rate_at_k" if self.k is None else "label_overlap_at_k": table,
            "validation_pairs": len(valid),
        }
        return best

    # -- answering -------------------------------------------------------------------------------

    def _candidates_separated(self, probs: np.ndarray) -> bool:
        """Whether :meth:`_candidates` reads the same labels in the same order from any probabilities within
        ``CANDIDATE_TIE`` / 2 of ``probs``: its top ``n_candidates`` + 1 are pairwise at least ``CANDIDATE_TIE``
        apart (or the candidates are every label, whatever the probabilities)."""
        if not self.config.use_candidates:
            return True
        top = np.sort(np.asarray(probs, dtype=np.float64))[::-1][: self.n_candidates + 1]
        return bool(np.all(top[:-1] - top[1:] >= CANDIDATE_TIE))

    def _candidates(self, probs: np.ndarray) -> list[int]:
        if not self.config.use_candidates:
            return list(range(len(self._labels)))
        return [int(k) for k in np.argsort(-probs, kind="stable")[: self.n_candidates]]

    def option(self, label: int) -> str:
        """How a candidate label is listed in a query prompt."""
        return self._options[label]

    def _option_subset(self, labels: Sequence[int]) -> list[str]:
        return [self._options[k] for k in labels]

    async def _answer(
        self,
        ctx: RunContext,
        head: Drug,
        tail: Drug,
        probs: np.ndarray,
        text_vec: np.ndarray,
        pair_vec: np.ndarray,
        paths: list[str],
        repo: Repository | None,
        exclude: int | None = None,
        query: bool = True,
        shown: Sequence[str] | None = None,
        found: tuple[np.ndarray, np.ndarray] | None = None,
    ) -> tuple[ChatResult, list[int], dict[str, Any]]:
        """The answer for one pair; ``query=False`` (the refinement of cases) answers in the default order and
        mode, so shuffled and likelihood runs share one repository and differ only in how queries are answered.
        ``shown``: the insight the prompt shows for each case (default: the cases' own); ``found``: the cases
        already retrieved for it (indices and scores, as :meth:`Repository.retrieve` gives them), or None."""
        cases_text, retrieved = self._retrieve_cases(repo, text_vec, pair_vec, exclude, shown, found)
        if not retrieved and self._uses_cases:  # (without cases, by design)
            self.count("queries_without_cases")
        labels = self._candidates(probs)
        if query and self.config.shuffle_options is not None:
            rng = np.random.default_rng([self.config.shuffle_options, head.node_id, tail.node_id])
            labels = [labels[i] for i in rng.permutation(len(labels))]
        user, schema = self.query_prompt(head, tail, cases_text, paths, self._option_subset(labels))
        messages = [{"role": "system", "content": self.predict_system}, {"role": "user", "content": user}]
        result = await ctx.model("generator").chat(
            messages,
            temperature=self.config.temperature,
            max_tokens=self.config.answer_tokens,
            json_schema=schema,
            seed=ctx.seed,
        )
        trace = {
            "cases": retrieved,
            "context_labels": _case_labels(retrieved),  # what the cases say (the GNN's candidates: "candidates")
            "lambda": self.lam if self._uses_cases else None,
            "paths": paths,
            "candidates": [[k, round(float(probs[k]), 4)] for k in labels[:20]],
            "llm": [llm_trace("generator", messages, result)],
        }
        if query and self._uses_cases and repo is not None and len(repo):
            trace["context_labels_by_lambda"] = self._labels_by_lambda(repo, text_vec, pair_vec)
        return result, labels, trace

    def _labels_by_lambda(self, repo: Repository, text_vec: np.ndarray, pair_vec: np.ndarray) -> dict[str, list[int]]:
        """The labels the top-K cases would carry at every lam of the grid (the run's own lam among them or not):
        ``report --ceilings`` reads how often the gold is among them at each, for the same queries."""
        out = {}
        for lam in self.config.lambda_grid:
            idx, _ = repo.retrieve(text_vec, pair_vec, self.config.k_cases, lam)
            labels = [c.labels if c.labels is not None else c.label for c in (repo.cases[i] for i in idx.tolist())]
            out[str(lam)] = _case_labels([{"label": x} for x in labels])
        return out

    def _retrieve_cases(
        self,
        repo: Repository | None,
        text_vec: np.ndarray,
        pair_vec: np.ndarray,
        exclude: int | None,
        shown: Sequence[str] | None = None,
        found: tuple[np.ndarray, np.ndarray] | None = None,
    ) -> tuple[str, list[dict[str, Any]]]:
        """The prompt's solved-cases section (empty without cases) and a trace entry per retrieved case; ``shown``
        gives the insight shown for each case of the repository (default: the case's own)."""
        cases_text, retrieved = "", []
        if self.config.use_cases and repo is not None and len(repo):
            idx, scores = (
                found
                if found is not None
                else repo.retrieve(text_vec, pair_vec, self.config.k_cases, self.lam, exclude)
            )
            blocks = []
            for n, (i, score) in enumerate(zip(idx.tolist(), scores.tolist()), 1):
                case = repo.cases[i]
                a, b = self._drugs[case.head].name, self._drugs[case.tail].name
                blocks.append(
                    prompts.CASE.format(
                        index=n,
                        head=a,
                        tail=b,
                        head_description=case.head_description,
                        tail_description=case.tail_description,
                        insight=(case.insight if shown is None else shown[i]) or prompts.NO_INSIGHT,
                        interaction=self.interaction(self._target(case), a, b),
                    )
                )
                retrieved.append(
                    {
                        "case": i,
                        "pair": [case.head, case.tail],
                        "label": case.labels if case.labels is not None else case.label,
                        "score": round(float(score), 4),
                    }
                )
            if blocks:
                cases_text = "Solved cases:\n" + "\n\n".join(blocks) + "\n\n"
        return cases_text, retrieved

    def query_prompt(
        self, head: Drug, tail: Drug, cases_text: str, paths: list[str], options: list[str]
    ) -> tuple[str, dict[str, Any]]:
        """The user prompt asking for the pair's interaction type (or k side effects) and the answer's JSON schema."""
        fields = dict(
            cases=cases_text,
            head=head.name,
            tail=tail.name,
            head_description=self._descriptions.get((head.node_id, head.name), ""),
            tail_description=self._descriptions.get((tail.node_id, tail.name), ""),
            paths="Associations between them in a biomedical knowledge graph:\n" + prompts.paths_block(paths),
        )
        if self.k is None:
            user = prompts.QUERY.format(
                **fields, candidates="\n".join(f"{i}. {text}" for i, text in enumerate(options, 1))
            )
            schema = label_schema(len(options), mechanism=True)
        else:
            user = prompts.QUERY_TOPK.format(**fields, candidates="\n".join(options), k=self.k)
            schema = topk_schema(options, min(self.k, len(options)), mechanism=True)
        return user, schema

    async def _query_vectors(
        self, samples: Sequence[Sample], ctx: RunContext, llms: list[list[dict[str, Any]]], paths: bool = False
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, list[list[str] | None]]:
        """The query pairs' drugs described (each pair's calls traced into its list of ``llms``), then, for all the
        pairs at once, their GNN label scores, text vectors (retrieval only: empty without cases), unit-length
        GNN pair vectors (one row per pair) and, with ``paths``, each pair's paths (:meth:`_gnn`).

        All of a batch's CPU work is one job of the CPU worker (:func:`off_loop`): one GNN forward (the paths
        read from its walk subgraphs) and one encoder call for the batch, so its calls go out together while the
        worker prepares the next batch.
        One query at a time on the event loop, this work (two forwards and an embedding, ~115 ms a query on 2
        cores) held back the calls and kept a served model at about 4 requests in flight whatever the concurrency
        (docs/paper-scale.md)."""
        for sample, llm in zip(samples, llms):
            for drug in (sample.pair.head, sample.pair.tail):
                await self.describe(drug, ctx, llm)
        return await off_loop(self._vectors, [s.pair for s in samples], paths)

    def _vectors(
        self, pairs: Sequence[DrugPair], paths: bool
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, list[list[str] | None]]:
        probs, reprs, found = self._gnn(pairs, hide_own=False, paths=paths)
        text_vecs = (
            self._embed(
                [self._pair_text(p.head, p.tail, self._description(p.head), self._description(p.tail)) for p in pairs]
            )
            if self._uses_cases
            else np.zeros((len(pairs), 0), dtype=np.float32)
        )
        return probs, text_vecs, normalise(reprs), found

    def _cases_answer(
        self, sample: Sample, probs: np.ndarray, text_vec: np.ndarray, pair_vec: np.ndarray, llm: list[dict[str, Any]]
    ) -> Prediction:
        """Retrieval alone: the label the top-K retrieved cases carry most often, ties to the better-ranked case
        (the k labels carried most often on a label set); traced as the full system traces its retrieval."""
        pair = sample.pair
        repo = self.repository
        assert repo is not None
        _, retrieved = self._retrieve_cases(repo, text_vec, pair_vec, None)
        stated = _case_labels(retrieved)
        order = [int(k) for k in np.argsort(-probs, kind="stable")[: self.n_candidates]]
        trace = {
            "cases": retrieved,
            "context_labels": stated,
            "context_labels_by_lambda": self._labels_by_lambda(repo, text_vec, pair_vec),
            "lambda": self.lam,
            "candidates": [[k, round(float(probs[k]), 4)] for k in order],
            "llm": llm,
            "descriptions": [self._description(pair.head), self._description(pair.tail)],
        }
        if not stated:
            self.count("queries_without_cases")
            return Prediction.invalid(sample.id, "the repository returned no case", trace=trace)
        counts = Counter(stated)
        first = {label: i for i, label in reversed(list(enumerate(stated)))}
        voted = sorted(counts, key=lambda label: (-counts[label], first[label]))
        self.count("answered")
        if self.k is None:
            return Prediction(sample_id=sample.id, label=voted[0], trace=trace)
        return Prediction(sample_id=sample.id, ranked=voted[: self.k], trace=trace)

    def _gnn_answer(self, sample: Sample) -> Prediction:
        """The GNN module alone: its top candidate (top k of a label set), recorded as the full system records
        its candidates."""
        pair = sample.pair
        probs = self.gnn.encode([pair.head.node_id], [pair.tail.node_id], self._setting)[0][0]
        order = [int(k) for k in np.argsort(-probs, kind="stable")[: max(self.n_candidates, self.k or 1)]]
        trace = {
            "cases": [],
            "paths": [],
            "candidates": [[k, round(float(probs[k]), 4)] for k in order[: self.n_candidates]],
        }
        self.count("answered")
        if self.k is None:
            return Prediction(sample_id=sample.id, label=order[0], trace=trace)
        return Prediction(sample_id=sample.id, ranked=order[: self.k], trace=trace)

    async def predict(self, samples: Sequence[Sample], ctx: RunContext) -> list[Prediction]:
        if self._query_start is None:
            usage = self._ledger.snapshot() if self._ledger is not None else {}
            self._query_start = (time.time(), time.perf_counter(), time.process_time(), usage)
        try:
            return await self._predict(samples, ctx)
        finally:
            self._query_phase()

    async def _predict(self, samples: Sequence[Sample], ctx: RunContext) -> list[Prediction]:
        if self.config.answer == "gnn":
            return [self._gnn_answer(sample) for sample in samples]
        llms: list[list[dict[str, Any]]] = [[] for _ in samples]
        answer = self.config.answer == "llm"
        probs, text_vecs, pair_vecs, paths = await self._query_vectors(samples, ctx, llms, paths=answer)
        if not answer:  # retrieval alone
            return [
                self._cases_answer(sample, probs[n], text_vecs[n], pair_vecs[n], llms[n])
                for n, sample in enumerate(samples)
            ]
        return await _one_after_another(
            self._llm_answer(sample, ctx, probs[n], text_vecs[n], pair_vecs[n], self._counted(paths[n]), llms[n])
            for n, sample in enumerate(samples)
        )

    async def _llm_answer(
        self,
        sample: Sample,
        ctx: RunContext,
        probs: np.ndarray,
        text_vec: np.ndarray,
        pair_vec: np.ndarray,
        paths: list[str],
        llm: list[dict[str, Any]],
    ) -> Prediction:
        """The full system's answer to one query, from its vectors and paths."""
        pair = sample.pair
        result, labels, trace = await self._answer(
            ctx, pair.head, pair.tail, probs, text_vec, pair_vec, paths, self.repository
        )
        trace["llm"] = llm + trace["llm"]
        trace["descriptions"] = [self._description(pair.head), self._description(pair.tail)]
        if self.k is None:
            prediction = answer_to_prediction(sample.id, result, self._option_subset(labels), labels, trace)
        else:
            prediction = answer_to_ranking(sample.id, result, self._option_subset(labels), labels, self.k, trace)
            for flag in trace["parse"]["flags"]:
                self.count(flag)
        self.count("answered" if prediction.valid else "invalid_answers")
        return prediction


async def _one_after_another(coroutines: Iterable[Coroutine[Any, Any, T]]) -> list[T]:
    """Each coroutine's results, in order; each is started in a turn of the event loop of its own, so the loop
    reads the answers that come in between (gathered at once, every coroutine's CPU work ran in one turn before
    any answer was read, and the requests already sent were cut as stalled). When one fails, the others stop."""
    tasks: list[asyncio.Future[T]] = []
    try:
        for coroutine in coroutines:
            tasks.append(asyncio.ensure_future(coroutine))  # runs its CPU work up to its first call ...
            await asyncio.sleep(0)  # ... in this turn of the loop, which also reads the answers come in
        return list(await asyncio.gather(*tasks))
    finally:
        for task in tasks:
            task.cancel()


@cache
def _cpu_worker() -> ThreadPoolExecutor:
    return ThreadPoolExecutor(1, thread_name_prefix="cbr-ddi-cpu")


async def off_loop(fn: Callable[..., T], *args: Any) -> T:
    """``fn(*args)`` on one worker thread shared by the process's queries, so the event loop sends and reads calls
    while the queries' CPU work (GNN forwards, embeddings: torch and numpy release the GIL) goes on; one worker,
    so queries do not fight over the cores the way several torch callers at once would."""
    return await asyncio.get_running_loop().run_in_executor(_cpu_worker(), partial(fn, *args))


def _case_labels(retrieved: Sequence[dict[str, Any]]) -> list[int]:
    """The labels retrieved cases carry, in the order shown (a label-set case's labels in its order)."""
    return [int(x) for c in retrieved for x in (c["label"] if isinstance(c["label"], (list, tuple)) else [c["label"]])]
