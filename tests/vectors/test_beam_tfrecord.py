"""Apache Beam's TFRecord test files (../shared/vectors/beam), read in place: ``inspect`` reports the
records of the good ones and fails cleanly on the corrupt and truncated ones, ``verify`` reports a
dataset whose data file was replaced by one of them, and our CRC masking matches the known answers."""

from __future__ import annotations

import hashlib
import json
import os
import shutil

import pytest

from tests.conftest import leftovers, lovecraft
from tests.readback import digest_of, entry_digest

GOOD = ["foo.tfrecord", "foo_bar.tfrecord", "bar_foo.tfrecord"]

# the exact one-line error each damaged file gives: the file, the record and its byte offset
BAD = {
    "foo_bad_data_crc.tfrecord": "record 1 at byte 0: data CRC mismatch (file is corrupt); re-create it",
    "foo_bad_length_crc.tfrecord": "record 1 at byte 0: length CRC mismatch (file is corrupt); re-create it",
    "short_3_bytes.tfrecord": "record 1 at byte 0: truncated record header; the file is cut short; re-create it",
    "foo_bar_truncated.tfrecord": "record 2 at byte 19: record length 3 runs past the end of the file; the file is cut short; re-create it",
}  # fmt: skip


@pytest.fixture
def beam(vectors) -> str:
    d = os.path.join(vectors, "beam")
    if not os.path.isdir(d):
        pytest.skip(f"../shared/vectors/beam not found at {d}")
    return d


def _expected(beam: str) -> dict:
    with open(os.path.join(beam, "expected.json"), encoding="utf-8") as f:
        return json.load(f)


def test_expected_json_covers_the_files(beam):
    files = _expected(beam)["files"]
    assert sorted(files) == sorted(GOOD + list(BAD))
    for name in GOOD:
        assert "records" in files[name]
    for name in BAD:
        assert "error" in files[name]
    with open(os.path.join(beam, "SHA256SUMS")) as f:
        sums = dict(reversed(line.split()) for line in f if line.strip())
    for name in files:  # the files are the ones SOURCE.txt describes
        with open(os.path.join(beam, name), "rb") as f:
            assert hashlib.sha256(f.read()).hexdigest() == sums[name], name


@pytest.mark.parametrize("name", GOOD)
def test_inspect_reports_the_records(beam, name):
    want = _expected(beam)["files"][name]["records"]
    path = os.path.join(beam, name)
    r = lovecraft("inspect", path, "--json", "-q")
    assert r.exit_code == 0, r.stderr
    rep = json.loads(r.stdout)
    assert rep["kind"] == "tfrecord" and rep["records"] == len(want) and rep["records_exact"]
    assert rep["examples"] is False  # Beam's records are raw bytes, not tf.train.Example messages
    assert [p["text"] for p in rep["preview"]] == want
    (f,) = rep["files"]
    assert (f["path"], f["records"], f["size"]) == (path, len(want), os.path.getsize(path))
    assert f["record_bytes"]["total"] == sum(len(x) for x in want)
    r = lovecraft("inspect", path, "-q")
    assert r.exit_code == 0, r.stderr
    n = len(want)
    assert r.stdout.splitlines()[:2] == [
        f"{path}: TFRecord, not compressed, {os.path.getsize(path)} B, {n} record{'s' if n > 1 else ''} (record bytes 3..3, mean 3.0)",
        f"records: {n} (the framing and both CRCs of every record checked)",
    ]
    assert [line.strip() for line in r.stdout.splitlines()[3:]] == [f"3 bytes: '{x}'" for x in want]


def test_inspect_several_files_at_once(beam):
    paths = [os.path.join(beam, n) for n in GOOD]
    r = lovecraft("inspect", *paths, "--json", "-q")
    assert r.exit_code == 0, r.stderr
    rep = json.loads(r.stdout)
    assert rep["records"] == 5 and [f["records"] for f in rep["files"]] == [1, 2, 2]
    r = lovecraft("inspect", *paths, "--sample", "2", "--json", "-q")
    rep = json.loads(r.stdout)
    assert (r.exit_code, rep["records"], rep["records_exact"]) == (0, 2, False)


@pytest.mark.parametrize("name", list(BAD))
def test_inspect_fails_cleanly_on_damage(beam, name):
    path = os.path.join(beam, name)
    r = lovecraft("inspect", path, "-q")
    assert (r.exit_code, r.stdout) == (1, "")
    assert r.stderr == f"Error: {path}: {BAD[name]}\n"
    r = lovecraft("inspect", os.path.join(beam, "foo.tfrecord"), path, "--json", "-q")  # after a good file
    assert (r.exit_code, r.stderr) == (1, f"Error: {path}: {BAD[name]}\n")
    # no report of the good file: the error, as JSON
    assert json.loads(r.stdout) == {
        "ok": False,
        "error": {"message": f"{path}: {BAD[name]}", "kind": "input", "exit_code": 1},
    }


@pytest.mark.parametrize("name", list(BAD))
def test_loader_framing_agrees(beam, name):
    """The loaders' own (vectorised) framing reader refuses the same files, naming the record."""
    from lovecraft_convert.errors import LovecraftError
    from lovecraft_convert.formats.tfrecord.framing import record_count

    for good in GOOD:
        assert record_count(os.path.join(beam, good)) == len(_expected(beam)["files"][good]["records"])
    with pytest.raises(LovecraftError) as e:
        record_count(os.path.join(beam, name))
    assert f"{os.path.join(beam, name)}: record " in e.value.one_line()


def _dataset_with(tmp_path, beam: str, name: str, rehash: bool) -> str:
    """A one-row tfrecord dataset whose data file is replaced by Beam's ``name``; with ``rehash`` the
    manifest is made to agree with the new bytes (size and digest), as if the file had been damaged
    before it was hashed, so only decoding can tell."""
    src = tmp_path / "in.txt"
    src.write_text("foo\n")
    out = str(tmp_path / "ds")
    r = lovecraft("convert", str(src), "-o", out, "--to", "tfrecord", "-q")
    assert r.exit_code == 0, r.stderr
    data = os.path.join(out, "data.tfrecord")
    shutil.copyfile(os.path.join(beam, name), data)
    if rehash:
        mpath = os.path.join(out, "_manifest.json")
        with open(mpath) as f:
            m = json.load(f)
        with open(data, "rb") as f:
            b = f.read()
        for fr in m["files"]:
            alg = entry_digest(fr)[0]
            fr["bytes"], fr[alg] = len(b), digest_of(b, alg)
        with open(mpath, "w") as f:
            json.dump(m, f)
    return out


@pytest.mark.parametrize("rehash", [False, True], ids=["manifest-stale", "manifest-rehashed"])
@pytest.mark.parametrize("name", list(BAD))
def test_verify_reports_a_damaged_tfrecord(tmp_path, beam, name, rehash):
    out = _dataset_with(tmp_path, beam, name, rehash)
    data = os.path.join(out, "data.tfrecord")
    r = lovecraft("verify", out)
    assert r.exit_code == 1
    lines = r.stdout.splitlines()
    assert lines[-1] == f"{data}: {BAD[name]}"  # the decoding problem, naming the record
    if rehash:
        assert lines == [f"{data}: {BAD[name]}"]
    else:  # the size check speaks first
        size = os.path.getsize(data)
        assert lines[0].startswith(f"{data}: {size} bytes on disk, the manifest says ") and len(lines) == 2
    assert r.stderr == f"{out}: {len(lines)} problem{'s' if len(lines) > 1 else ''} found\n"
    assert "Traceback" not in r.stdout + r.stderr
    r = lovecraft("verify", out, "--json", "-q")
    assert r.exit_code == 1
    probs = json.loads(r.stdout)["problems"]
    assert probs[-1]["kind"] == "decode" and probs[-1]["file"] == "data.tfrecord"
    assert leftovers(tmp_path) == []


def test_verify_reports_records_that_are_not_examples(tmp_path, beam):
    """A valid TFRecord of raw bytes is still not the dataset the manifest describes."""
    out = _dataset_with(tmp_path, beam, "foo.tfrecord", rehash=True)
    r = lovecraft("verify", out, "-q")
    assert (r.exit_code, r.stdout) == (
        1,
        f"{out}/data.tfrecord: record 1: malformed tf.train.Example (wire type 6); the record is corrupt\n",
    )


def _kat_bytes(key: str) -> bytes:
    if key.startswith("b'"):
        return key[2:-1].encode()
    if " x" in key:
        byte, times = key.split(" x")
        return bytes.fromhex(byte) * int(times)
    return bytes.fromhex(key.replace(" ", ""))


def test_masked_crc32c_known_answers(beam):
    from lovecraft_convert.formats.tfrecord.framing import masked_crc32c

    kat = _expected(beam)["masked_crc32c_kat"]
    assert kat
    for key, want in kat.items():
        assert masked_crc32c(_kat_bytes(key)) == int(want, 16), key
