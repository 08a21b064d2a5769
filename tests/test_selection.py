"""One rule for a run's samples: :func:`ddibench.runner.selection.run_samples` of a run's identity gives exactly the
samples the runner answered (with ``--limit``, and shard by shard), and every reader that selects them again
(submit, verify, verify in its sandbox, the board's read of a verified bundle, the ceilings, ``report --against``,
the planner) takes the same ones."""

from __future__ import annotations

import json
from pathlib import Path

from ddibench.hashing import sha256_text
from ddibench.registry import get_task
from ddibench.runner.records import BundleIndex, read_identity
from ddibench.runner.selection import Selection, run_samples, shard_of


def _journalled(folder: Path) -> list[str]:
    return [json.loads(line)["prediction"]["sample_id"] for line in (folder / "journal.jsonl").read_text().splitlines()]


def _ids(samples: list) -> list[str]:
    return [s.id for s in samples]


def test_the_runner_and_every_reader_take_the_samples_of_the_runs_identity(cli, stub, tmp_path: Path) -> None:
    from ddibench.runner.ceilings import compute
    from ddibench.runner.compare import compare
    from ddibench.runner.forecast import forecast
    from ddibench.runner.plan import RunRequest
    from ddibench.submission import WHOLE_TRACES, read_bundle, recorded_verdict, submit, verify
    from ddibench.submission.pack import whole_trace_ids
    from ddibench.submission.sandbox import verify_isolated

    task = get_task("drugbank_s2")
    data = task.load()
    # run A: --limit with a seed other than the default, by a system whose traces the ceilings read
    run_a = tmp_path / "a"
    model = f"vllm:stub-model@{stub.base_url}"
    args = ["run", "-s", "naive-cbr", "-t", task.name, "--limit", "40", "--seed", "3", "-m", model]
    code, _, err = cli(*args, "--run-dir", str(run_a))
    assert code == 0, err
    ident = read_identity(run_a / "run.json")
    assert ident.selection == Selection("test", 40, 3)
    expected = _ids(run_samples(task, ident.selection, data))
    assert sorted(_journalled(run_a)) == sorted(expected) and len(expected) == 40
    assert sha256_text("\n".join(expected)) == ident.sample_ids_sha256  # the runner's order too

    # run B: another --limit, answered in two shards and merged
    run_b = tmp_path / "b"
    for i in (1, 2):
        code, _, err = cli("run", "-s", "majority", "-t", task.name, "--limit", "300", "--seed", "3",
                           "--shard", f"{i}/2", "--run-dir", str(run_b))  # fmt: skip
        assert code == 0, err
    ident_b = read_identity(run_b / "run.json")
    everything_b = run_samples(task, ident_b.selection, data)
    for i in (1, 2):
        mine = _ids(run_samples(task, ident_b.selection.sharded((i, 2)), data))
        assert _journalled(run_b / "shards" / f"{i}-of-2") == mine == _ids(shard_of(everything_b, (i, 2)))
    code, _, err = cli("merge", str(run_b))
    assert code == 0, err
    assert sorted(_journalled(run_b)) == sorted(_ids(everything_b)) and len(everything_b) == 300

    # the readers
    bundle = submit(run_a, tmp_path / "a.tar.gz", compact=True)
    compact = BundleIndex.model_validate_json(read_bundle(bundle)["bundle.json"]).compact
    assert compact is not None and compact.whole_trace_ids == whole_trace_ids(expected, WHOLE_TRACES, 3)
    assert _ids(verify(bundle).samples) == expected
    assert _ids(verify_isolated(bundle).samples) == expected
    assert _ids(recorded_verdict(bundle, "recomputed", None, preview=True).samples) == expected
    ceilings = compute(run_a)
    assert ceilings is not None and ceilings.n == ceilings.with_context == 40
    in_b = set(_ids(everything_b))
    shared = [sid for sid in expected if sid in in_b]
    assert shared and compare(run_a, run_b, replicates=200).n == len(shared)
    planned = forecast(RunRequest(task=task.name, system="majority", limit=300, seed=3))
    assert (planned.samples, planned.of) == (300, len(data.split("test")))
