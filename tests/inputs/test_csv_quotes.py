"""CSV quote state (inputs/csvquote.py): where records end, across piece and part boundaries.

A quote opens a quoted field only at the start of a field; anywhere else in an unquoted field
(``5'10"``, ``y"z``) it is a literal, as pyarrow (which parses each piece) and Python's ``csv``
module read it. Generated CSVs are read through the reader cut into tiny pieces, and through
tiny byte-range parts, and compared with what Python's ``csv`` module reads from the same bytes.

The one difference from ``csv`` the generator avoids on purpose: ``csv`` returns ``[]`` for a
blank line where pyarrow (so lovecraft) skips the line; blank lines are generated, and ``[]``
rows are dropped from the ``csv`` side. ``csv`` (not strict) also accepts an input that ends
inside a quoted field, taking the rest of the file as the value; lovecraft refuses it
(test_unterminated_quote_*). ``csv`` has no comment lines: they are left out of its input.
"""

from __future__ import annotations

import csv
import io
import os

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lovecraft_convert.inputs import open_reader
from lovecraft_convert.inputs.csvquote import QuoteScan, Syntax, record_pieces
from lovecraft_convert.inputs.split import split_points
from lovecraft_convert.schema import VarColumn
from tests.conftest import leftovers, lovecraft

SETTINGS = settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])

PLAIN = st.text(alphabet="ab é;'\t", max_size=6)  # no delimiter, quote, line end or comment char
STRAY = st.text(alphabet="ab\"'", min_size=1, max_size=5)  # may hold quotes (never at the start)
INSIDE = st.text(alphabet='ab,"\n#é;', max_size=8).map(lambda s: s.replace("\n", "\r\n") if "#" in s else s)


@st.composite
def fields(draw, first: bool):
    """(raw text, value) of one field. ``first``: the field starts a line (never the comment char)."""
    kind = draw(st.sampled_from(["plain", "stray", "quoted", "quoted", "empty", "closed+tail"]))
    if kind == "plain":
        v = draw(PLAIN)
        return v, v
    if kind == "stray":
        v = draw(PLAIN).strip("#") or "x"
        v += draw(STRAY)  # 5'10", y"z, a"": quotes after the first character are literals
        return v, v
    if kind == "empty":
        return "", ""
    inner = draw(INSIDE)
    raw = '"' + inner.replace('"', '""') + '"'
    if kind == "closed+tail":  # "ab"x"y: after the closing quote, the rest is literal
        tail = draw(st.sampled_from("xy")) + draw(st.text(alphabet='xy"', max_size=3))  # not a doubled quote
        return raw + tail, inner + tail
    return raw, inner


@st.composite
def csv_files(draw):
    """(full bytes, bytes Python's csv reads, expected rows, skip_rows, comment, header)."""
    ncols = draw(st.integers(2, 4))
    newline = draw(st.sampled_from(["\n", "\r\n"]))
    comment = draw(st.sampled_from([None, "#"]))
    header = draw(st.booleans())
    skip = draw(st.integers(0, 2))
    preamble = "".join(draw(st.text(alphabet='m ,"#x', max_size=8)) + "\n" for _ in range(skip))
    full = [preamble]
    clean = []
    rows = []
    if header:
        line = ",".join(f"c{i}" for i in range(ncols)) + newline
        full.append(line)
        clean.append(line)
    for _ in range(draw(st.integers(1, 25))):
        if comment and draw(st.integers(0, 5)) == 0:
            full.append("#" + draw(st.text(alphabet='x ,"', max_size=6)) + "\n")  # quotes in a comment
        if draw(st.integers(0, 9)) == 0:
            full.append(newline)  # a blank line: skipped (csv gives [], dropped below)
            clean.append(newline)
        made = [draw(fields(first=i == 0)) for i in range(ncols)]
        if comment:  # a row whose first field starts with the comment character is a comment
            made[0] = (made[0][0], made[0][1]) if not made[0][0].startswith("#") else ("x", "x")
        line = ",".join(r for r, _ in made) + newline
        full.append(line)
        clean.append(line)
        rows.append([v for _, v in made])
    if draw(st.booleans()):  # no line end after the last row
        full[-1] = full[-1].removesuffix(newline)
        clean[-1] = clean[-1].removesuffix(newline)
    return "".join(full).encode(), "".join(clean), rows, skip, comment, header


def _strings(batches, names) -> list[list[str]]:
    out: dict[str, list[str]] = {n: [] for n in names}
    for b in batches:
        for n in names:
            col = b.columns[n]
            assert isinstance(col, VarColumn)
            data = col.values.tobytes()
            offs = col.offsets.tolist()
            out[n] += [data[offs[i] : offs[i + 1]].decode() for i in range(len(offs) - 1)]
    return [list(r) for r in zip(*(out[n] for n in names), strict=True)]


def _python_csv(clean: str, header: bool) -> list[list[str]]:
    rows = [r for r in csv.reader(io.StringIO(clean, newline="")) if r]
    return rows[1:] if header else rows


@given(
    f=csv_files(),
    piece=st.integers(1, 64),
    part=st.integers(1, 80),
)
@SETTINGS
def test_generated_csv_matches_python_csv_across_pieces_and_parts(tmp_path, f, piece, part):
    data, clean, rows, skip, comment, header = f
    want = _python_csv(clean, header)
    assert want == rows  # the generator writes what csv reads back (stray quotes are literals)
    path = str(tmp_path / "g.csv")
    with open(path, "wb") as fh:
        fh.write(data)
    names = [f"c{i}" for i in range(len(rows[0]))] if header else [f"f{i}" for i in range(len(rows[0]))]
    reader = open_reader(
        [path],
        budget=16 << 20,
        header=header,
        column_types={n: "string" for n in names},
        skip_rows=skip,
        comment=comment,
    )
    assert reader.schema.names == names
    reader.options.piece_bytes = piece  # pieces of a few bytes: cuts fall everywhere
    assert _strings(reader.batches(), names) == want
    parts = reader.partitions(part)
    got = _strings((b for p in parts for b in reader.part_batches(p)), names)
    assert got == want
    if len(data) > 3 * part + 100:
        assert len(parts) > 1


def _machine(buf: bytes, comment: int | None, state0: int) -> tuple[list[int], list[int], bool]:
    """A byte-by-byte CSV state machine (pyarrow's states): record ends, comment lines, open at
    the end. The reference for the vectorised QuoteScan."""
    state, line_start, ends, comments, i = ("Q" if state0 else "FS"), True, [], [], 0
    while i < len(buf):
        c = buf[i]
        if state == "FS" and line_start and c == comment:
            comments.append(i)
            j = buf.find(b"\n", i)
            if j < 0:
                break
            ends.append(j + 1)
            i = j + 1
            continue
        if state in ("FS", "UNQ", "QQ") and c in (0x2C, 0x0D, 0x0A):
            state = "FS"
            if c == 0x0A:
                ends.append(i + 1)
        elif state == "FS":
            state = "Q" if c == 0x22 else "UNQ"
        elif state == "Q" and c == 0x22:
            state = "QQ"
        elif state == "QQ":
            state = "Q" if c == 0x22 else "UNQ"
        line_start = c == 0x0A
        i += 1
    return ends, comments, state == "Q"


@given(
    buf=st.lists(st.sampled_from(['"', '""', ",", "\n", "\r\n", "\r", "a", "#", '"a,"', 'y"', "\n#"]), max_size=300),
    comment=st.sampled_from([None, "#"]),
    state0=st.sampled_from([0, 1]),
    local=st.sampled_from([64, 1 << 20]),
)
@settings(max_examples=300, deadline=None)
def test_quote_scan_matches_a_byte_by_byte_state_machine(buf, comment, state0, local):
    from lovecraft_convert.inputs import csvquote

    data = "".join(buf).encode()
    ends, comments, open_ = _machine(data, None if comment is None else ord(comment), state0)
    old, csvquote.LOCAL_LIMIT = csvquote.LOCAL_LIMIT, local  # small: the whole-sequence path
    try:
        scan = QuoteScan(data, Syntax.of(",", comment), state0)
        assert scan.record_end() == (ends[-1] if ends else 0)
        assert scan.record_end(1) == (ends[0] if ends else 0)
        assert scan.final == open_
        other = QuoteScan(data, Syntax.of(",", comment), 1 - state0).final
        assert [csvquote.apply(scan.map(), s) for s in (state0, 1 - state0)] == [open_, other]
        assert scan.comments(len(data))[0].tolist() == comments
    finally:
        csvquote.LOCAL_LIMIT = old


def _pieces(data: bytes, chunk: int, comment: str | None = None) -> list[bytes]:
    it = iter([data[i : i + chunk] for i in range(0, len(data), chunk)])
    return list(record_pieces(lambda n: next(it, b""), chunk, Syntax.of(",", comment)))


def test_stray_quote_does_not_flip_the_state():
    # parity would see 2 quotes before the newline after "open and cut there, inside the field
    data = b'a,b\nx,y"z\n1,"open\n2,3"\n'
    for chunk in range(1, len(data) + 1):
        pieces = _pieces(data, chunk)
        assert b"".join(pieces) == data
        assert all(QuoteScan(p, Syntax()).final == 0 for p in pieces)
        assert b'1,"open\n2,3"\n' in [p[p.find(b"1,") :] for p in pieces if b'"open' in p]


def test_comment_lines_inside_and_outside_quotes():
    data = b'# a "comment\na,b\n1,"x\n# not a comment"\n#c,"\n2,3\n'
    for chunk in range(1, len(data) + 1):
        assert b"".join(_pieces(data, chunk, "#")) == b'a,b\n1,"x\n# not a comment"\n2,3\n'


def test_split_points_are_record_starts(tmp_path):
    """Every cut of the parallel split is where Python's csv module starts a record."""
    rng = np.random.default_rng(5)
    vals = ['y"z', "5'10\"", '"a\nb"', '"x,""y"""', "plain", '""', '"#\n#"']
    lines = ["a,b"] + [f"{rng.choice(vals)},{rng.choice(vals)}" for _ in range(3000)]
    data = ("\n".join(lines) + "\n").encode()
    path = tmp_path / "s.csv"
    path.write_bytes(data)
    consumed = [0]

    def lines():
        for line in io.StringIO(data.decode(), newline=""):
            consumed[0] += len(line.encode())
            yield line

    starts = {0} | {consumed[0] for _ in csv.reader(lines())}  # csv reads a record's lines, no more
    for target in (7, 64, 1000, 4096):
        points = split_points(str(path), len(data), target, quoted=True, syntax=Syntax(), header=True)
        cuts = [p for p, _ in points[1:]]
        assert cuts == sorted(set(cuts)) and len(cuts) > len(data) // target // 4
        assert set(cuts) <= starts, target


def test_split_with_small_scan_windows(tmp_path, monkeypatch):
    """The split reads the file in windows; runs of quote-free lines are skipped whole. With a
    window of a few bytes, every cut is still a record (or comment line) start and the parts read
    the rows the file holds."""
    from lovecraft_convert.inputs import csvquote

    rng = np.random.default_rng(9)
    pieces, starts, want = ['pre "amble\n', "# c\n", "id,v\n"], set(), []
    for i in range(1500):
        off = sum(len(x.encode()) for x in pieces)
        if i % 50 == 0:
            starts.add(off)
            pieces.append(f'# note {i} "\n')
            off = sum(len(x.encode()) for x in pieces)
        quoted = (i // 200) % 2 == 1  # stretches of quote-free rows and of quoted ones
        v = f'"a\n# {i}, ""q"""' if quoted and rng.random() < 0.5 else (f'x"{i}' if quoted else f"p{i}")
        starts.add(off)
        pieces.append(f"{i},{v}\n")
        want.append([str(i), v[1:-1].replace('""', '"') if v.startswith('"') else v])
    data = "".join(pieces).encode()
    path = tmp_path / "w.csv"
    path.write_bytes(data)
    monkeypatch.setattr(csvquote, "SCAN_WINDOW", 37)
    for target in (100, 999, 5000):
        points = split_points(str(path), len(data), target, True, None, Syntax.of(",", "#"), 1, True)
        cuts = [p for p, _ in points[1:]]
        assert len(cuts) > len(data) // target // 2 and set(cuts) <= starts, target
    reader = open_reader([str(path)], budget=16 << 20, skip_rows=1, comment="#", column_types={"v": "string"})
    parts = reader.partitions(999)
    assert len(parts) > 10
    got = []
    for p in parts:
        for b in reader.part_batches(p):
            got += [[str(int(i)), r[0]] for i, r in zip(b.columns["id"], _strings([b], ["v"]), strict=True)]
    assert got == want


@pytest.mark.parametrize(
    "body, line",
    [
        (b'a,b\n1,2\n3,"x\n4,y\n5,z\n', 3),  # no stray quote
        (b'a,b\nx,y"z\n1,"open\n2,3\n', 3),  # one: parity would call the file balanced
        (b'a,b\n5\'10",y"z\n1,2\n7,"open\n2,3\n', 4),  # two
        (b'a,b\n1,"a\nb"\nx,y"\n2,"c\n\n', 5),  # after a closed multi-line field and a stray quote
    ],
    ids=["0 stray", "1 stray", "2 stray", "after a multi-line field"],
)
@pytest.mark.parametrize("command", ["convert", "shard", "inspect"])
def test_unterminated_quote_after_stray_quotes(tmp_path, body, line, command):
    src = tmp_path / "q.csv"
    src.write_bytes(body)
    out = str(tmp_path / "out")
    args = {
        "convert": ["convert", str(src), "-o", out, "--to", "parquet", "-q"],
        "shard": ["shard", str(src), "-o", out, "--to", "parquet", "--num-shards", "2", "--workers", "1", "-q"],
        "inspect": ["inspect", str(src), "-q"],
    }[command]
    r = lovecraft(*args)
    assert (r.exit_code, r.stderr) == (
        1,
        f"Error: {src}, line {line}: a quoted field opened here is never closed (unterminated quote); "
        "fix the quoting (a quote inside a quoted field is written twice)\n",
    )
    assert not os.path.exists(out) and leftovers(tmp_path) == []


def test_unterminated_quote_in_a_later_part_names_its_line(tmp_path):
    import lovecraft_convert as lc
    from lovecraft_convert.errors import InputError

    rows = "".join(f'{i},"v{i}",y"{i}\n' for i in range(2000))
    src = tmp_path / "p.csv"
    src.write_bytes(b"a,b,c\n" + rows.encode() + b'7,"open,x\n8,9,10\n')
    with pytest.raises(InputError) as e:
        lc.shard([str(src)], str(tmp_path / "out"), to="parquet", num_shards=2, part_bytes=4096, progress=False)
    assert e.value.one_line().startswith(f"{src}, line 2002: a quoted field opened here is never closed")
