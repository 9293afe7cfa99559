"""A test double of a reader with a planted crash: the fuzzer's canary (tests/test_fuzz_smoke.py).

:func:`read_csv` reads CSV inputs as the library's reader does (UTF-8, RFC 4180 quoting, a header,
rows of the header's width), refusing what it cannot read with ``InputError``, except for one
planted bug: a data row with more fields than the header indexes past the header, an
``IndexError``. None of the fuzzer's seed inputs has such a row, so only a fuzzer that really
mutates its inputs (a ``,`` inserted outside quotes, a quote removed) and reports what crashed
finds it. Other inputs are ignored.
"""

from __future__ import annotations

import csv
import io

from lovecraft_convert.errors import InputError


def read_csv(path: str) -> int:
    """The number of data rows of a plain ``.csv`` input; 0 for any other input."""
    if not path.endswith(".csv"):
        return 0
    with open(path, "rb") as f:
        data = f.read()
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise InputError(f"{path}: invalid UTF-8 ({e.reason})", hint="fix the file") from None
    try:
        rows = list(csv.reader(io.StringIO(text, newline="")))
    except csv.Error as e:
        raise InputError(f"{path}: cannot parse CSV ({e})", hint="fix the file") from None
    if not rows:
        raise InputError(f"{path}: empty input", hint="check the file")
    header, body = rows[0], [r for r in rows[1:] if r]
    for line, row in enumerate(body, 2):
        if len(row) < len(header):
            raise InputError(f"{path}, line {line}: expected {len(header)} fields, found {len(row)}")
        names = [header[i] for i in range(len(row))]  # the planted crash: IndexError on a wider row
        assert len(names) == len(row)
    return len(body)
