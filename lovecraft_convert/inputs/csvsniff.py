"""What the CSV reader tells from the first lines of a file, beyond its types: a delimiter other
than the comma, and first lines that are probably not a header.

Decided, and why:

* Delimiter (only when ``--delimiter`` is not given and the file is not a ``.tsv``): when every one
  of the first lines holds the same number of semicolons (outside quotes, no quoted field spanning
  lines) and either no comma or not the same number of commas and never more than the semicolons
  (a European spreadsheet's export, whose decimal commas vary), the file is semicolon-separated;
  when no line of
  the first ones holds a comma or a quote (so commas would give one column) and every one holds the
  same number of tabs, the file is tab-separated; with spaces, the same holds, no field is empty
  (no runs of spaces, none leading or trailing), and every field of the data lines is a number
  (scikit-learn's ``diabetes_data_raw.csv.gz``, ``np.savetxt``'s default): the file is read so,
  and the manifest's sources and the summary say so. Text with spaces (a one-column CSV of names
  or sentences) is never split: its fields are not numbers.
* A header whose first name is a number, over a column of numbers (scikit-learn's ``iris.csv``
  begins ``150,4,setosa,...``; a headerless file begins with data): it is kept as the header (a
  header of years is a header), with a note naming ``--no-header`` and ``--skip-rows 1``.
"""

from __future__ import annotations

from .csvquote import BOM

SNIFF_BYTES = 64 << 10
SNIFF_LINES = 100


def is_number(s: str) -> bool:
    """A decimal number as CSV writers spell them (``1``, ``-2.5``, ``1e-3``, ``nan``, ``inf``)."""
    try:
        float(s)
    except ValueError:
        return False
    return bool(s) and not s[0].isspace() and not s[-1].isspace()


def head_lines(data: bytes, skip_rows: int, comment: str | None, at_end: bool) -> list[str]:
    """The first lines of ``data`` (the start of a decompressed input) that hold values: after a BOM,
    ``skip_rows`` lines, blank and comment lines; the last line only when ``at_end`` (it may be cut)."""
    if data.startswith(BOM):
        data = data[len(BOM) :]
    lines = data.split(b"\n")
    if not at_end:
        lines = lines[:-1]
    out = []
    for raw in lines[skip_rows:]:
        text = raw.rstrip(b"\r").decode("utf-8", "replace")
        if not text.strip() or (comment is not None and text.startswith(comment)):
            continue
        out.append(text)
        if len(out) == SNIFF_LINES:
            break
    return out


def _outside_quotes(line: str, ch: str) -> int:
    """How many ``ch`` a line holds outside double-quoted fields."""
    n, quoted = 0, False
    for c in line:
        if c == '"':
            quoted = not quoted
        elif c == ch and not quoted:
            n += 1
    return n


def sniff_delimiter(lines: list[str], header: bool) -> str | None:
    """Semicolon, tab or space when the first ``lines`` are separated so (see the module's rules),
    else None."""
    if not lines:
        return None
    semis = {_outside_quotes(s, ";") for s in lines}
    balanced = all(s.count('"') % 2 == 0 for s in lines)  # no quoted field spans lines
    if balanced and len(semis) == 1 and (k := semis.pop()) > 0:
        commas = [_outside_quotes(s, ",") for s in lines]
        # no commas, or not the same number a line and never more than the semicolons (a decimal
        # comma a field at most)
        if set(commas) == {0} or (len(set(commas)) > 1 and max(commas) <= k):
            return ";"
    if any("," in s or '"' in s for s in lines):
        return None
    tabs = {s.count("\t") for s in lines}
    if len(tabs) == 1 and tabs.pop() > 0:
        return "\t"
    if any("\t" in s for s in lines):
        return None
    spaces = {s.count(" ") for s in lines}
    if len(spaces) != 1 or spaces.pop() == 0:
        return None
    rows = [s.split(" ") for s in lines]
    if any(not f for r in rows for f in r):  # runs of spaces, or one leading or trailing
        return None
    data = rows[1:] if header and len(rows) > 1 else rows
    return " " if all(is_number(f) for r in data for f in r) else None


def delimiter_note(spec_name: str, delimiter: str, fields: int) -> str:
    what = "tabs" if delimiter == "\t" else "spaces"
    flag = "'\\t'" if delimiter == "\t" else "' '"
    if delimiter == ";":
        return (
            f"{spec_name}: the fields are separated by semicolons ({fields} per line), so it is read so "
            "(--delimiter ';' says so; --delimiter , reads commas); a decimal comma (3,14) stays text"
        )
    return (
        f"{spec_name}: no commas; the fields are separated by {what} ({fields} per line), so it is read so "
        f"(--delimiter {flag} says so; --delimiter , keeps one column)"
    )


def header_note(
    spec_name: str, names: list[str], numeric_first: bool, data_row: list[str] | None, skip_rows: int, delimiter: str
) -> str | None:
    """A note when the header's first name is a number over a column of numbers (``numeric_first``):
    probably data, or a line before the data. ``data_row``: the first row after it; ``skip_rows``:
    the lines already skipped before the header."""
    if not names or not numeric_first or not is_number(names[0]):
        return None
    shown = delimiter.join(names[:6]) + (f"{delimiter}..." if len(names) > 6 else "")
    then = " --no-header" if data_row is not None and all(is_number(v) for v in data_row) else ""
    return (
        f"{spec_name}: the header '{shown}' starts with a number over a column of numbers: if that line is data, "
        f"pass --no-header (or --column-names); if it is a line before the data (scikit-learn's CSVs begin "
        f"with one), --skip-rows {skip_rows + 1}{then}"
    )


def looks_like_data(names: list[str]) -> bool:
    """Every name a number: a header line that is more probably the first row."""
    return bool(names) and all(is_number(n) for n in names)


def name_blanks(names: list[str]) -> tuple[list[str], str | None]:
    """Header ``names`` with the empty ones named as ``--no-header`` names columns (``f<i>``, 0-based;
    ``_`` added while the name is taken), and a note saying so (None: none was empty). A trailing
    delimiter (``a,b,``) makes one: HDF5 cannot name a dataset ``''``, a memmap file would be ``.npy``."""
    if all(names):
        return names, None
    taken = set(names)
    out = []
    for i, n in enumerate(names):
        if not n:
            n = f"f{i}"
            while n in taken:
                n += "_"
            taken.add(n)
        out.append(n)
    blank = [i for i, n in enumerate(names) if not n]
    fields = ", ".join(str(i + 1) for i in blank)
    called = ", ".join(f"'{out[i]}'" for i in blank)
    many = len(blank) > 1
    return out, (
        f"the header gives no name to field{'s' if many else ''} {fields}: "
        f"{'their columns are' if many else 'its column is'} called {called}, as --no-header names columns"
        + (" (a delimiter at the end of every line makes an empty last field)" if not names[-1] else "")
    )
