"""ddibench leaderboard (Streamlit). Run with ``ddibench board serve [--store board.duckdb]``.

Every number comes from the results store, where it was recomputed from submitted per-sample
predictions; each run links to its provenance (manifest, data hashes, judge, deviations) and to a
per-sample drill-down. URL parameters ``?run=RUN_ID&sample=SAMPLE_ID`` open a run or a sample directly.
"""

from __future__ import annotations

import os
from pathlib import Path

import altair as alt
import pandas as pd
import streamlit as st
from ddibench.leaderboard import data as board

st.set_page_config(page_title="ddibench leaderboard", layout="wide")
STORE = Path(os.environ.get("DDIBENCH_BOARD", "board.duckdb"))


@st.cache_data(show_spinner=False)
def load_runs(path: str, mtime: float) -> pd.DataFrame:
    return board.runs(Path(path))


if not STORE.exists():
    st.error(f"No results store at {STORE}. Add runs with `ddibench board add BUNDLE` or set DDIBENCH_BOARD.")
    st.stop()

all_runs = load_runs(str(STORE), STORE.stat().st_mtime)
st.title("ddibench leaderboard")
st.caption(
    f"{len(all_runs):,} runs. Cells: primary metric [95% CI, clustered by drug or source document]; "
    "★ best in the task; ≈ not significantly different from the best (paired bootstrap on shared samples)."
)

with st.sidebar:
    st.header("Filters")
    filters = {
        column: st.multiselect(label, sorted(all_runs[column].dropna().unique()))
        for column, label in (
            ("family", "task family"),
            ("setting", "setting"),
            ("model", "model"),
            ("profile", "hardware profile"),
            ("tier", "trust tier"),
        )
    }
    previews = st.checkbox("include previews (--limit runs, not submittable)", value=True)

runs = board.filtered(all_runs, filters, previews)
params = st.query_params
# a deep link (?run=...) opens the run view directly
matrix_tab, cost_tab, run_tab = st.tabs(
    ["Matrix", "Cost vs quality", "Run details"], default="Run details" if params.get("run") else "Matrix"
)

with matrix_tab:
    table = board.matrix(runs)
    if table.empty:
        st.info("No runs match the filters.")
    else:
        st.subheader("Tasks × systems")
        st.table(table)  # a real HTML table: small, and readable by screen readers and browser tests
        heat = runs.sort_values(["submittable", "primary_value"], ascending=False).drop_duplicates(
            ["task", "system"]
        )
        chart = (
            alt.Chart(heat)
            .mark_rect()
            .encode(
                x=alt.X("system:N", title="system"),
                y=alt.Y("task:N", title="task"),
                color=alt.Color("primary_value:Q", title="primary metric", scale=alt.Scale(scheme="viridis")),
                tooltip=[
                    "task",
                    "system",
                    "model",
                    "tier",
                    alt.Tooltip("primary_value:Q", format=".3f"),
                    "ci_low",
                    "ci_high",
                    "tied",
                ],
            )
            .properties(height=40 * max(1, heat["task"].nunique()))
        )
        st.altair_chart(chart, width="stretch")

with cost_tab:
    st.subheader("Cost per item against quality")
    cost = runs[
        [
            "task",
            "system",
            "model",
            "tier",
            "primary_value",
            "calls_per_item",
            "tokens_per_item",
            "usd_per_item",
        ]
    ]
    if not cost.empty:
        front = board.pareto(runs)
        points = (
            alt.Chart(cost)
            .mark_circle(size=90)
            .encode(
                x=alt.X("tokens_per_item:Q", title="LLM tokens per item"),
                y=alt.Y("primary_value:Q", title="primary metric"),
                color="task:N",
                tooltip=[
                    "task",
                    "system",
                    "model",
                    "calls_per_item",
                    "tokens_per_item",
                    "usd_per_item",
                    "primary_value",
                ],
            )
        )
        line = (
            alt.Chart(front)
            .mark_line(strokeDash=[4, 3])
            .encode(x="tokens_per_item:Q", y="primary_value:Q", color="task:N")
        )
        st.altair_chart(points + line, width="stretch")
        st.dataframe(cost, width="stretch")
        st.caption(
            "Dashed: the cost-quality Pareto front of each task. US dollars appear where $DDIBENCH_PRICES gives the model's price."
        )

with run_tab:
    labels = {f"{r.task} · {r.system} · {r.model} · {r.run_id}": r.run_id for r in all_runs.itertuples()}
    wanted = params.get("run")
    names = list(labels)
    index = next((i for i, k in enumerate(names) if labels[k] == wanted), 0)
    if names:
        choice = st.selectbox("run", names, index=index)
        run_id = labels[choice]
        detail = board.run_detail(STORE, run_id)
        manifest = detail["manifest"]
        st.subheader(f"Run {run_id}")
        left, right = st.columns(2)
        with left:
            st.markdown(f"**Trust tier:** {detail['tier']}")
            st.markdown(
                f"**Task:** {manifest['task']['name']} {manifest['task']['version']} — data `{manifest['task']['data_sha256'][:16]}…`"
            )
            st.markdown(
                f"**System:** {manifest['system']['name']} {manifest['system']['version']} — config `{manifest['system']['config_hash']}`"
            )
            st.markdown(
                f"**Code:** ddibench {manifest.get('ddibench_version')} `{(manifest.get('git_commit') or 'no git')[:12]}`"
            )
            st.markdown(
                f"**Profile:** {manifest['profile']['declared']['name']} (detected: {manifest['profile']['detected'].get('cpu')})"
            )
            for role, model in manifest.get("models", {}).items():
                st.markdown(f"**{role}:** `{model['spec']}`")
            if "judge" in manifest.get("scoring", {}):
                judge = manifest["scoring"]["judge"]
                st.markdown(
                    f"**Judge:** `{judge['identity'].get('model')}` rubric `{judge['rubric_sha256'][:12]}`"
                )
            for note in manifest["task"].get("deviations", []) + manifest["system"].get("deviations", []):
                st.warning(note)
        with right:
            st.markdown("**Metrics**")
            st.dataframe(
                pd.DataFrame(
                    [
                        {"metric": k, "value": v["value"], "ci_low": v["ci_low"], "ci_high": v["ci_high"]}
                        for k, v in detail["metrics"].items()
                    ]
                ),
                width="stretch",
            )
            with st.expander("full manifest"):
                st.json(manifest, expanded=False)
        st.subheader("Samples")
        wrong = st.checkbox("only wrong or low-scoring samples")
        table = board.samples(STORE, run_id, wrong)
        st.dataframe(table, width="stretch", height=260)
        ids = list(table["sample_id"])
        wanted_sample = params.get("sample")
        if wanted_sample and wanted_sample not in ids:
            ids.insert(0, wanted_sample)
        if ids:
            sample_id = st.selectbox(
                "sample", ids, index=ids.index(wanted_sample) if wanted_sample in ids else 0
            )
            item = board.sample(STORE, run_id, sample_id)
            if item:
                st.markdown(f"**Sample {sample_id}**")
                st.markdown(f"**Gold:** {item['gold']}")
                st.markdown(
                    f"**Prediction:** {item['prediction']}  (score {item['score']}, {'valid' if item['valid'] else 'invalid'})"
                )
                st.markdown("**Input**")
                st.json(item["input"], expanded=False)
                st.markdown("**Trace**")
                st.json(item["trace"], expanded=True)
