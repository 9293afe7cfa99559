"""Nesting depth of JSON Lines, bounded before any parser sees a line (issue 38, point 5): a record
after the first thousand that brings a new key nested 30,000 levels deep made pyarrow's type
inference overflow its stack (SIGSEGV, exit 139, the output's temporary directory and lock left
behind). The scan is checked here against a plain state machine written for this test (hypothesis),
and the CLI in a subprocess (a crash must not take pytest with it)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import lovecraft_convert.inputs.jsondepth as jd
from lovecraft_convert.inputs.jsondepth import MAX_DEPTH, first_too_deep, key_path
from tests.conftest import SHARED, SUBPROCESS_ENV, leftovers, memcapped

MEMCAP = os.path.join(SHARED, "tools", "memcap")
MESSAGE = (
    f"objects and arrays nested more than {MAX_DEPTH} levels deep; "
    f"flatten the record (records are read up to {MAX_DEPTH} levels deep)"
)


def _reference(data: bytes, limit: int) -> tuple[int, int] | None:
    """Byte by byte: a quote after an odd run of backslashes does not count; brackets inside
    strings do not count; every line starts at depth 0 outside a string."""
    offset = 0
    for index, line in enumerate(data.split(b"\n")[:-1]):
        depth, inside, run = 0, False, 0
        for j, c in enumerate(line):
            if c == 92:
                run += 1
                continue
            escaped, run = run % 2 == 1, 0
            if c == 34:
                inside = inside if escaped else not inside
            elif not inside and c in b"{[":
                depth += 1
                if depth > limit:
                    return index, offset + j
            elif not inside and c in b"}]":
                depth -= 1
        offset += len(line) + 1
    return None


@settings(max_examples=400, deadline=None)
@given(
    st.lists(st.sampled_from([b"{", b"}", b"[", b"]", b'"', b"\\", b"a", b"\n", b":", b","]), max_size=120),
    st.integers(0, 5),
    st.sampled_from([5, 16, 1 << 20]),
)
def test_the_scan_agrees_with_a_byte_by_byte_reading(tokens, limit, window):
    data = b"".join(tokens) + b"\n"
    old = jd.WINDOW
    jd.WINDOW = window  # small windows: lines longer than a window carry their state across
    try:
        assert first_too_deep(data, limit) == _reference(data, limit)
    finally:
        jd.WINDOW = old


def test_brackets_inside_strings_and_escaped_quotes_do_not_count():
    deep_text = b'{"a": "' + b"{[" * 200 + b'\\"' + b"[" * 100 + b'"}\n'
    assert first_too_deep(deep_text) is None
    assert first_too_deep(b'{"a": ' + b"[" * 63 + b"]" * 63 + b"}\n") is None  # 64 levels, the line's own included
    assert first_too_deep(b'{"a": 1}\n{"a": ' + b"[" * 64 + b"]" * 64 + b"}\n") == (1, 9 + 6 + 63)


def test_a_line_longer_than_a_window_carries_its_state():
    line = b'{"pad": "' + b"x" * (3 << 20) + b'", "d": ' + b"[" * 70 + b"]" * 70 + b"}\n"
    line_in_string = b'{"pad": "' + b"[" * (3 << 20) + b'"}\n'
    assert first_too_deep(line_in_string) is None
    found = first_too_deep(b'{"a": 1}\n' + line)
    assert found is not None and found[0] == 1
    assert key_path(line, found[1] - len(b'{"a": 1}\n')) == "d[][][][][]... (64 levels)"


def test_the_key_path_names_objects_and_array_elements():
    line = b'{"a": {"b": [{"c": [[['
    assert key_path(line, len(line) - 1) == "a.b[].c[][]"
    line = b'{"x": 1, "k\\u00e9y": {"z": {'
    assert key_path(line, len(line) - 1) == "k\u00e9y.z"


def _convert(src: str, out: str, *extra: str, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "lovecraft_convert", "convert", src, "-o", out, "--to", "parquet", "-q", *extra],
        capture_output=True,
        text=True,
        env=SUBPROCESS_ENV,
        timeout=timeout,
    )


def _deep_after(path, records: int, levels: int) -> str:
    with open(path, "w") as f:
        for i in range(records):
            f.write(f'{{"a": {i}}}\n')
        f.write('{"a": 1, "b": ' + '{"c": ' * levels + "1" + "}" * levels + "}\n")
    return str(path)


def test_a_new_key_nested_30000_levels_deep_after_1000_records_is_one_line(tmp_path):
    """Was: SIGSEGV in pyarrow's inference (exit 139), .out.tmp-PID and .out.lock left behind."""
    src = _deep_after(tmp_path / "deep.jsonl", 1000, 30_000)
    r = _convert(src, str(tmp_path / "out"))
    assert (r.returncode, r.stdout) == (1, "")
    assert r.stderr == f"Error: {src}, line 1001, key 'b.c.c.c.c.c... (64 levels)': {MESSAGE}\n"
    assert not os.path.exists(tmp_path / "out") and leftovers(tmp_path) == []


def test_deep_arrays_in_the_first_record_and_in_values_mode_are_one_line(tmp_path):
    first = tmp_path / "first.jsonl"
    first.write_text('{"a": [' + "[" * 100 + "]" * 100 + "]}\n")
    r = _convert(str(first), str(tmp_path / "o1"))
    assert (r.returncode, r.stderr) == (1, f"Error: {first}, line 1, key 'a[][][][][]... (64 levels)': {MESSAGE}\n")
    values = tmp_path / "values.jsonl"
    values.write_text("[1]\n[2]\n" + "[" * 20_000 + "]" * 20_000 + "\n")
    r = _convert(str(values), str(tmp_path / "o2"))
    assert (r.returncode, r.stderr) == (1, f"Error: {values}, line 3, key '[][][][][][]... (64 levels)': {MESSAGE}\n")


def test_a_json_array_element_nested_too_deeply_is_named_as_an_element(tmp_path):
    """A JSON array input is read as JSON Lines of its elements: the message counts elements."""
    src = tmp_path / "deep.json"
    src.write_text("[" + ", ".join(f'{{"a": {i}}}' for i in range(1000)) + ', {"a": 1, "b": ' + "[" * 30_000
                   + "]" * 30_000 + "}]")  # fmt: skip
    r = _convert(str(src), str(tmp_path / "out"))
    assert (r.returncode, r.stderr) == (1, f"Error: {src}, element 1001, key 'b[][][][][]... (64 levels)': {MESSAGE}\n")
    assert leftovers(tmp_path) == []


def test_64_levels_are_read(tmp_path):
    """The limit counts the line's own object: 64 levels of keys down to a value convert."""
    src = tmp_path / "ok.jsonl"
    value = "1"
    for _ in range(63):
        value = '{"k": ' + value + "}"
    src.write_text('{"a": 0}\n{"a": 1, "k": ' + value + "}\n")
    r = _convert(str(src), str(tmp_path / "out"))
    assert r.returncode == 0, r.stderr
    import pyarrow.parquet as pq

    t = pq.read_table(str(tmp_path / "out"))
    got = t.column("k" + ".k" * 63).to_pylist()  # (the first record lacks it: NaN)
    assert got[0] != got[0] and got[1] == 1


def test_a_hugging_face_state_nested_too_deeply_is_one_line(tmp_path):
    d = tmp_path / "hf"
    d.mkdir()
    (d / "state.json").write_text('{"_data_files": ' + "[" * 100_000 + "]" * 100_000 + "}")
    r = subprocess.run(
        [sys.executable, "-m", "lovecraft_convert", "inspect", str(d)],
        capture_output=True,
        text=True,
        env=SUBPROCESS_ENV,
    )
    assert r.returncode == 1
    assert r.stderr.startswith(f"Error: {d / 'state.json'}: not a Hugging Face dataset state (RecursionError: ")
    assert r.stderr.count("\n") == 1


@pytest.mark.slow
def test_100000_levels_after_200000_records_under_a_512_mib_cap(tmp_path):
    """Was: 5 GB, then SIGSEGV. Now refused at the scan of its piece, inside the cap."""
    if not os.access(MEMCAP, os.X_OK):
        pytest.skip(f"{MEMCAP} not found")
    src = _deep_after(tmp_path / "deep.jsonl", 200_000, 100_000)
    lovecraft = os.path.join(os.path.dirname(sys.executable), "lovecraft")
    out = str(tmp_path / "out")
    r, peak = memcapped(
        MEMCAP, 512, [lovecraft, "convert", src, "-o", out, "--to", "parquet", "-q"], env=SUBPROCESS_ENV
    )
    if r.returncode == 3:
        pytest.skip("memcap cannot make a memory cgroup here")
    print(f"\n100,000 levels after 200,000 records: rc {r.returncode}, peak {peak} MiB")
    assert r.returncode == 1, r.stderr[-2000:]
    assert f"Error: {src}, line 200001, key 'b.c.c.c.c.c... (64 levels)': {MESSAGE}\n" in r.stderr
    assert peak is not None and peak < 512
