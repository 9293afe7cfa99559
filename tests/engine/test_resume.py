"""``--resume`` after a run that finished (a CI retry, a Makefile re-run): the same command exits 0
and writes nothing; other options or changed inputs are an error naming what differs."""

from __future__ import annotations

import json
import os

import pytest

from tests.conftest import lovecraft, write


def _snapshot(d: str) -> dict[str, tuple[int, int]]:
    """Every file's size and mtime (ns): a run that writes nothing leaves them all unchanged."""
    out = {}
    for root, _dirs, files in os.walk(d):
        for f in files:
            st = os.stat(os.path.join(root, f))
            out[os.path.relpath(os.path.join(root, f), d)] = (st.st_size, st.st_mtime_ns)
    return out


@pytest.fixture
def src(tmp_path) -> str:
    return write(tmp_path / "d.csv", b"a,b\n" + b"".join(f"{i},{i * 0.5}\n".encode() for i in range(3000)))


@pytest.mark.parametrize(
    "command, args",
    [
        ("shard", ["--to", "parquet", "--num-shards", "3"]),
        ("bucket", ["--to", "memmap", "--num-buckets", "2", "--ragged"]),
        # a finished --dedup exact dataset was refused: "its --dedup digests are unset, this version
        # makes xxh3-128" (the digest was compared, and missing on the finished side)
        ("shard", ["--to", "parquet", "--num-shards", "3", "--dedup", "exact"]),
    ],
)
def test_resume_on_a_finished_dataset_writes_nothing(src, tmp_path, command, args):
    out = str(tmp_path / "out")
    assert lovecraft(command, src, "-o", out, *args, "-q").exit_code == 0
    before = _snapshot(str(tmp_path))
    r = lovecraft(command, src, "-o", out, *args, "--resume", "--workers", "1")  # workers may differ
    assert (r.exit_code, r.stdout) == (0, "")
    assert r.stderr == f"{out}: already complete, made by the same command and inputs; nothing to do\n"
    assert _snapshot(str(tmp_path)) == before
    r = lovecraft(command, src, "-o", out, *args, "--resume", "--json")
    assert r.exit_code == 0 and json.loads(r.stdout)["nothing_to_do"] is True
    assert _snapshot(str(tmp_path)) == before


def test_resume_on_a_finished_bucket_dedup_exact_dataset_writes_nothing(tmp_path):
    src = write(tmp_path / "t.txt", b"".join(f"line {i % 700}\n".encode() for i in range(3000)))
    out = str(tmp_path / "out")
    args = ["--to", "memmap", "--num-buckets", "2", "--dedup", "exact"]
    assert lovecraft("bucket", src, "-o", out, *args, "-q").exit_code == 0
    before = _snapshot(str(tmp_path))
    r = lovecraft("bucket", src, "-o", out, *args, "--resume")
    assert (r.exit_code, r.stderr) == (
        0,
        f"{out}: already complete, made by the same command and inputs; nothing to do\n",
    )
    assert _snapshot(str(tmp_path)) == before


def test_resume_with_another_option_names_it(src, tmp_path):
    out = str(tmp_path / "out")
    assert lovecraft("shard", src, "-o", out, "--to", "parquet", "--num-shards", "3", "-q").exit_code == 0
    before = _snapshot(str(tmp_path))
    r = lovecraft("shard", src, "-o", out, "--to", "parquet", "--num-shards", "4", "--resume")
    assert (r.exit_code, r.stderr) == (
        2,
        f"Error: {out}: a finished dataset is there, but it was made with --num-shards 3, this run has 4; "
        "run the same command as before, or pass --overwrite to replace it\n",
    )
    r = lovecraft("shard", src, "-o", out, "--to", "parquet", "--rows-per-shard", "1000", "--resume")
    assert r.exit_code == 2 and "it was made with --num-shards 3, this run has unset" in r.stderr
    assert _snapshot(str(tmp_path)) == before


def test_resume_after_the_input_changed(src, tmp_path):
    out = str(tmp_path / "out")
    assert lovecraft("shard", src, "-o", out, "--to", "parquet", "--num-shards", "3", "-q").exit_code == 0
    with open(src, "ab") as f:
        f.write(b"9999,1.0\n")
    r = lovecraft("shard", src, "-o", out, "--to", "parquet", "--num-shards", "3", "--resume")
    assert (r.exit_code, r.stderr) == (
        1,
        f"Error: {out}: a finished dataset is there, but {src} changed since it was made (size, mtime differ); "
        "run the same command as before, or pass --overwrite to replace it\n",
    )
    r = lovecraft("shard", src, "-o", out, "--to", "parquet", "--num-shards", "3", "--overwrite", "--resume", "-q")
    assert r.exit_code == 0  # --overwrite replaces it


def test_resume_on_a_damaged_finished_dataset(src, tmp_path):
    out = str(tmp_path / "out")
    assert lovecraft("shard", src, "-o", out, "--to", "parquet", "--num-shards", "3", "-q").exit_code == 0
    victim = os.path.join(out, "part-00001-of-00003.parquet")
    os.truncate(victim, 10)
    r = lovecraft("shard", src, "-o", out, "--to", "parquet", "--num-shards", "3", "--resume")
    assert (r.exit_code, r.stderr) == (
        1,
        f"Error: {victim}: the finished dataset's file is missing or of another size; "
        "run `lovecraft verify` on it, or pass --overwrite to write it again\n",
    )


def test_unfinished_run_with_other_options_names_the_option(src, tmp_path):
    import lovecraft_convert as lc
    from lovecraft_convert.inputs import resolve_inputs

    out = str(tmp_path / "out")
    work = tmp_path / ".out.partial"
    work.mkdir()
    o = lc.ShardOptions(to="parquet", num_shards=3)
    o.validate()
    made = o.fingerprint()  # what a run with 3 shards planned
    sources = [s.describe() for s in resolve_inputs([src])]
    plan = {"fingerprint": {"options": made, "sources": sources, "version": 1}, "widened": {}}
    (work / "plan.json").write_text(json.dumps(plan))
    with pytest.raises(lc.OptionsError) as e:
        lc.shard(src, out, to="parquet", num_shards=4, resume=True)
    assert e.value.one_line() == (
        f"{out}: the unfinished run in {work} cannot be resumed: it was made with num_shards 3, this run has 4; "
        "run it with the same command and resume=True, or pass overwrite=True to start over"
    )  # a Python caller reads keyword names (the CLI's flags: tests/engine's CLI cases)
    assert e.value.exit_code == 2
    # refused, the unfinished run is kept for the command that may resume it (it was deleted, the
    # advice to resume it then starting over)
    assert json.loads((work / "plan.json").read_text()) == plan
    assert lc.shard(src, out, to="parquet", num_shards=3, resume=True).rows > 0


def test_a_near_dedup_parameter_given_as_its_default_is_the_same_command(src, tmp_path):
    """An unfinished `--dedup near` run without --threshold, resumed with --threshold 0.8 (the
    default) and --ngram 5: the same command (it was refused, "made with --threshold unset, this
    run has 0.8"); --threshold 0.7 is another."""
    import lovecraft_convert as lc
    from lovecraft_convert.engine.journal import difference

    o = lc.ShardOptions(to="parquet", num_shards=3, dedup="near", dedup_columns=["c"], seed=7)
    o.validate()
    same = lc.ShardOptions(to="parquet", num_shards=3, dedup="near", dedup_columns=["c"], seed=7, threshold=0.8,
                           ngram=5, dedup_seed=7)  # fmt: skip
    same.validate()
    other = lc.ShardOptions(to="parquet", num_shards=3, dedup="near", dedup_columns=["c"], seed=7, threshold=0.7)
    other.validate()
    assert difference({"options": o.fingerprint()}, {"options": same.fingerprint()}) is None
    assert difference({"options": o.fingerprint()}, {"options": other.fingerprint()}) == (
        "option",
        "it was made with --threshold 0.8, this run has 0.7",
    )


def test_an_unfinished_dedup_run_of_another_digest_is_not_resumed(src, tmp_path):
    """A --dedup exact run begun by a version that hashed rows with BLAKE3: its spilled digests
    cannot be mixed with this version's, so the resume is refused, saying why."""
    import lovecraft_convert as lc
    from lovecraft_convert.inputs import resolve_inputs

    out = str(tmp_path / "out")
    work = tmp_path / ".out.partial"
    work.mkdir()
    o = lc.ShardOptions(to="parquet", num_shards=3, dedup="exact")
    o.validate()
    sources = [s.describe() for s in resolve_inputs([src])]
    made = {"options": o.fingerprint(), "sources": sources, "version": 1, "digest": "blake3-128"}
    (work / "plan.json").write_text(json.dumps({"fingerprint": made, "widened": {}}))
    with pytest.raises(lc.OutputError) as e:
        lc.shard(src, out, to="parquet", num_shards=3, dedup="exact", resume=True)
    assert e.value.one_line() == (
        f"{out}: the unfinished run in {work} cannot be resumed: its dedup digests are blake3-128, this "
        "version makes xxh3-128; run it with the same command and resume=True, or pass overwrite=True to start over"
    )
    assert lc.shard(src, out, to="parquet", num_shards=3, dedup="exact", overwrite=True).rows > 0


def test_a_run_resumed_with_another_dedup_mode_names_the_mode():
    """A --dedup exact run resumed with --dedup near differs in --band-rows too (near's parameters
    resolved), which sorted first and was named alone: '--band-rows unset, this run has 8' (an
    outside trial). The options others depend on are named first."""
    from lovecraft_convert.engine.journal import difference

    old = {"options": {"dedup": "exact", "to": "parquet"}, "sources": [], "version": 1}
    new = {"options": {"dedup": "near", "band_rows": 8, "bands": 14, "to": "parquet"}, "sources": [], "version": 1}
    assert difference(old, new) == ("option", "it was made with --dedup exact, this run has near")


def test_resume_of_a_finished_dataset_with_a_new_report_says_there_is_nothing_to_report(tmp_path):
    """--resume with a --dedup-report the first run did not write said 'nothing to do', exit 0, and
    no report came (an outside trial)."""
    src = write(tmp_path / "t.jsonl", b"".join(b'{"text": "%d"}\n' % (i % 50) for i in range(500)))
    out, rep = str(tmp_path / "out"), str(tmp_path / "rep.jsonl")
    args = ["--to", "parquet", "--num-shards", "2", "--dedup", "exact"]
    assert lovecraft("shard", src, "-o", out, *args, "-q").exit_code == 0
    r = lovecraft("shard", src, "-o", out, *args, "--resume", "--dedup-report", rep)
    assert (r.exit_code, r.stderr) == (
        2,
        f"Error: --dedup-report {rep}: {out} is already complete, so nothing is read that could be reported; "
        "pass --overwrite to run it again with the report\n",
    )
    assert not os.path.exists(rep)
    assert lovecraft("shard", src, "-o", out, *args, "--overwrite", "--dedup-report", rep, "-q").exit_code == 0
    assert lovecraft("shard", src, "-o", out, *args, "--resume", "--dedup-report", rep).exit_code == 0  # it is there
