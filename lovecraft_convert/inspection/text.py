"""Reports of :func:`~lovecraft_convert.inspection.inspect` as text for a terminal."""

from __future__ import annotations

import shlex
from typing import Any

import numpy as np

from ..formats import get as get_format
from ..util import counted, format_size, number

BAR = 40


def draw_histogram(hist: list[dict[str, int]], width: int = BAR) -> list[str]:
    """The length histogram as text bars."""
    top = max((b["rows"] for b in hist), default=0)
    lw = max(len(number(b["hi"])) for b in hist) if hist else 1
    cw = max(len(number(b["rows"])) for b in hist) if hist else 1
    lines = []
    eighths = " ▏▎▍▌▋▊▉█"
    for b in hist:
        units = b["rows"] / top * width * 8 if top else 0
        full, part = divmod(int(round(units)), 8)
        bar = "█" * full + (eighths[part] if part else "")
        if b["rows"] and not bar:
            bar = "▏"
        label = number(b["lo"]) if b["lo"] == b["hi"] else f"{number(b['lo'])}-{number(b['hi'])}"
        lines.append(f"    {label:>{2 * lw + 1}} {bar:<{width}} {number(b['rows']):>{cw}}")
    return lines


PARTS = {  # what an input is made of: (one, several)
    "row_groups": ("row group", "row groups"),
    "record_batches": ("record batch", "record batches"),
    "files": ("file", "files"),
    "shards": ("shard", "shards"),
    "arrays": ("array", "arrays"),
    "datasets": ("dataset", "datasets"),
}


def format_text(r: dict[str, Any]) -> str:
    """A report of :func:`inspect` as text for a terminal."""
    if r.get("kind") == "dataset":
        return _format_dataset(r)
    if r.get("kind") not in ("inputs", "dataset"):  # files a format describes on its own
        return get_format(r["kind"]).format_file_report(r)
    out = []
    for i in r["inputs"]:
        comp = i["compression"] or "not compressed"
        if not i["compression"] and i.get("compression_inside"):  # compressed inside the file's format
            comp = f"{i['compression_inside']}-compressed inside"
        size = format_size(i["size"]) if i["size"] is not None else "size unknown"
        more = "".join(
            f", {counted(i[k], *PARTS[k])}"
            for k in ("row_groups", "record_batches", "files", "shards", "arrays", "datasets")
            if k in i
        )
        out.append(f"{i['name']}: {i['format']}, {comp}, {size}{more}")
        out.extend(f"note: {n}" for n in i.get("notes") or [])
    if r["rows_exact"]:
        out.append(f"rows: {number(r['rows'])}")
    else:
        est = f"~{number(r['rows'])}" if r["rows"] is not None else "unknown"
        out.append(f"rows: {est} (an ESTIMATE from a sample of the first {number(r['sample_rows'])} rows)")
    if r.get("skipped_files"):
        from ..inputs.filedecode import Skipped

        left = Skipped()
        left.merge(r["skipped_files"])
        out.extend(left.note())
    out.append("")
    for c in r["columns"]:
        shape = f" shape per row {tuple(c['shape'])}" if c["shape"] else ""
        nulls = f", {number(c['nulls'])} null or missing" if c.get("nulls") and "input_type" not in c else ""
        out.append(f"column '{c['name']}': {c['type']}{shape}{nulls}")
        if "input_type" in c:
            out.append("  " + _input_type(c))
        if "min" in c:
            out.append(
                f"  min {number(c['min'])}  max {number(c['max'])}  mean {number(c['mean'])}  NaN {number(c['nan'])}"
                f"  ({number(c['values'])} values)"
            )
        if "float16" in c:
            h = c["float16"]
            out.append(
                f"  as float16: {number(h['overflow'])} would overflow (|x| > 65504), {number(h['flushed_to_zero'])} would "
                f"flush to zero; largest rounding error {h['max_abs_error']:.3g} (relative {h['max_rel_error']:.3g})"
            )
        if "lengths" in c and c["lengths"].get("rows"):
            ln = c["lengths"]
            unit = c.get("length_unit") or ("bytes" if c["kind"] in ("string", "binary") else "elements")
            out.append(
                f"  length ({unit}): min {number(ln['min'])}  mean {ln['mean']:.1f}  p50 {number(ln['p50'])}  "
                f"p90 {number(ln['p90'])}  p99 {number(ln['p99'])}  max {number(ln['max'])}  ({number(c.get('empty'))} empty)"
            )
            out.extend(draw_histogram(ln["histogram"]))
            b = ln["buckets"]
            out.append(
                f"  --num-buckets {b['k']}: boundaries {b['boundaries']}, padding efficiency "
                f"{b['efficiency']:.1%} (unbucketed {ln['efficiency_unbucketed']:.1%})"
            )
            table = ", ".join(f"K={k}: {v:.1%}" for k, v in ln["efficiency_by_k"].items())
            out.append(f"  efficiency by K: {table}")
        out.append("")
    for c in r.get("columns_not_read") or []:
        why = f": it {c['refused']}" if c.get("refused") else f" ({c.get('input_type')}): not selected"
        out.append(f"column '{c['name']}' not read{why}")
    if r.get("columns_not_read"):
        out.append("")
    if r.get("estimated_bytes"):
        how = ["estimated from a sample"] if r.get("estimated_exact") is False else []
        if r.get("estimated_of") == "tokens":
            how.append("of the tokens alone, as convert --tokenizer writes them")
        out.append(f"output size per format ({'; '.join(how)}):")
        f16 = r.get("estimated_bytes_float16") or {}
        for fmt, size in r["estimated_bytes"].items():
            text = format_size(size) if size is not None else "cannot hold these columns"
            extra = f"  (--dtype float16: {format_size(f16[fmt])})" if f16.get(fmt) is not None else ""
            out.append(f"  {fmt:<9} {text}{extra}")
    if r.get("plot"):
        out.append(f"plot: {r['plot']}")
    return "\n".join(out).rstrip() + "\n"


_SINCE = (("timestamp", " since the epoch"), ("date", " since the epoch"), ("time", " since midnight"))


def _input_type(c: dict[str, Any]) -> str:
    """``input type timestamp[ms, tz=UTC], stored as int64 (ms; null = NaT); 3 nulls``."""
    text = f"input type {c['input_type']}"
    if c.get("stored_as"):
        text += f", stored as {c['stored_as']}"
        if c.get("unit"):
            kind = str(c["input_type"])
            since = next((s for k, s in _SINCE if kind.startswith(k)), "")  # a duration is a count of units
            unit = {"D": "days"}.get(c["unit"], c["unit"])  # NumPy's code for a day
            text += f" ({unit}{since}, null = -2**63 as NumPy's NaT)"
    if c.get("decoded"):
        text += f" ({c['decoded']}-decoded)"
    if "nulls" in c:
        lists = c["input_type"].startswith(("list", "large_list", "fixed_size_list"))
        text += f"; {counted(c['nulls'], 'null')}" + (" (read as empty lists)" if lists and c["nulls"] else "")
    if c.get("null_elements"):
        text += f", {counted(c['null_elements'], 'null element')}"
    return text


def _removed(rm: dict[str, Any]) -> str:
    """``removed: 3,301 of 5,000 rows read: 12 by --filter 'lang == "en"', 3,289 duplicates (exact on text)``."""
    why = []
    if isinstance(rm.get("filter"), dict):
        why.append(f"{number(rm['filter'].get('rows'))} by --filter {rm['filter'].get('expression')!r}")
    d = rm.get("duplicate")
    if isinstance(d, dict):
        cols = list(d.get("columns") or [])
        on = ", ".join(cols[:8]) + (f", ... ({len(cols)} columns)" if len(cols) > 8 else "")
        n = d.get("rows")
        why.append(f"{number(n)} duplicate{'' if n == 1 else 's'} ({d.get('mode')} on {on})")
    gone = sum(v.get("rows") or 0 for v in rm.values() if isinstance(v, dict))
    return f"removed: {number(gone)} of {number(rm.get('read'))} rows read: {'; '.join(why)}"


def _format_dataset(r: dict[str, Any]) -> str:
    out = [f"{r['path']}: lovecraft dataset, {r['format']}, {number(r['rows'])} rows, {format_size(r['bytes'])}"]
    out.append(f"made by: lovecraft {shlex.join(r['argv']) if r.get('argv') else r.get('command')}")
    if r.get("created_at") or r.get("created_by"):
        out.append(f"  {r.get('created_by') or ''} {r.get('created_at') or ''}".rstrip())
    opts = r.get("options") or {}
    shown = {k: v for k, v in opts.items() if v not in (None, False, {}, [], "") and k != "overwrite"}
    if shown:
        out.append("options: " + ", ".join(f"{k}={_option(k, v)}" for k, v in shown.items()))
    if r.get("shuffle"):
        out.append(f"shuffled: {r['shuffle']}")
    if r.get("removed"):
        out.append(_removed(r["removed"]))
    out.append("schema:")
    stats = r.get("stats") or {}
    for f in r.get("schema") or []:
        st = stats.get(f.get("name"), {})
        bits = []
        if "min" in st:
            bits.append(f"min {number(st['min'])} max {number(st['max'])}")
        if st.get("nan"):
            bits.append(f"NaN {number(st['nan'])}")
        if st.get("length_max") is not None:
            bits.append(f"length {number(st.get('length_min'))}..{number(st.get('length_max'))}")
        desc = f.get("kind") if f.get("kind") != "fixed" else _dtype_name(f.get("dtype"))
        lg = f.get("logical")
        if isinstance(lg, dict) and lg.get("type"):  # what the stored values stand for
            unit = (
                f"[{lg['unit']}{', ' + lg['tz'] if lg.get('tz') else ''}]" if lg.get("unit") not in (None, "D") else ""
            )
            desc = f"{lg['type']}{unit} (stored as {desc})"
        shape = f" {tuple(f.get('shape'))}" if f.get("shape") else ""
        out.append(f"  {f.get('name')}: {desc}{shape}  {'; '.join(bits)}".rstrip())
    out.extend(f"note: {n}" for n in r.get("notes") or [])
    if r.get("buckets"):
        out.extend(_buckets(r))
    else:
        out.append(f"shards: {r['num_shards']}")
        for s in r["shards"][:8]:
            out.append(f"  {s['index']}: {_shard(s)}")
        if len(r["shards"]) > 8:
            out.append(f"  ... {len(r['shards']) - 8} more")
    tok = r.get("tokenizer") or (r.get("packing") or r.get("bucketing") or {}).get("tokenizer")
    if tok:
        marks = ", ".join(f"{k[:3]} {tok[k]}" for k in ("bos_id", "eos_id") if tok.get(k) is not None)
        out.append(f"tokenizer: {tok.get('path') or tok.get('name')} (vocabulary {number(tok.get('vocab_size'))}"
                   f"{', ' + marks if marks else ''}), {tok.get('dtype')} ids")  # fmt: skip
    p = r.get("packing")
    if p:
        out.append(
            f"packed: {number(p.get('documents'))} documents, {number(p.get('tokens'))} tokens in rows of "
            f"{number(p.get('seq_len'))} ({p.get('order')} order); {number(p.get('dropped_tokens'))} tokens dropped, "
            f"{number(p.get('padding_tokens'))} padding"
        )
    for name, h in (r.get("float16") or {}).items():
        out.append(
            f"float16 {name}: {number(h.get('overflow'))} overflowed ({number(h.get('clipped'))} clipped), "
            f"{number(h.get('flushed_to_zero'))} flushed to zero, max abs error {h.get('max_abs_error', 0):.3g}, "
            f"max rel error {h.get('max_rel_error', 0):.3g}"
        )
    out.append("")
    for lib, code in r["load"].items():
        out.append(f"load with {lib}:")
        out.extend("    " + line if line else "" for line in code.splitlines())
        out.append("")
    return "\n".join(out).rstrip() + "\n"


def _shard(s: dict) -> str:
    return f"{counted(s['rows'], 'row')}, {format_size(s['bytes'])}: {', '.join(s['files'])}"


def _buckets(r: dict[str, Any]) -> list[str]:
    """Each bucket with its lengths, rows and files (a bucket of several shards: each on a line)."""
    b = r.get("bucketing") or {}
    bounds = ",".join(map(str, b.get("boundaries") or []))
    eff = (
        f"; padding efficiency {b['padding_efficiency']:.1%}" if isinstance(b.get("padding_efficiency"), float) else ""
    )
    layout = f", {b['layout']} layout" if b.get("layout") else ""
    out = [f"buckets: {len(r['buckets'])}" + (f" (boundaries {bounds}{layout}{eff})" if bounds else "")]
    shards: dict[Any, list[dict]] = {}
    for s in r["shards"]:
        shards.setdefault(s.get("bucket"), []).append(s)
    for k, bk in enumerate(r["buckets"][:16]):
        mine = shards.get(bk.get("index"), [])
        head = f"  bucket {bk.get('index')}: lengths {bk.get('min_length')}..{bk.get('max_length')}"
        if len(mine) == 1:
            out.append(f"{head}, {_shard(mine[0])}")
            continue
        out.append(f"{head}, {counted(bk.get('rows') or 0, 'row')} in {len(mine)} shards")
        out.extend(f"    shard {s['index']}: {_shard(s)}" for s in mine[:8])
        if len(mine) > 8:
            out.append(f"    ... {len(mine) - 8} more")
        if k == 15 and len(r["buckets"]) > 16:
            out.append(f"  ... {len(r['buckets']) - 16} more buckets")
    return out


def _option(key: str, v: Any) -> str:
    """An option's value as a flag would give it (a dict as k=v pairs, a list comma-separated, bytes
    as a size)."""
    if key in ("max_memory", "part_bytes", "shard_size") and isinstance(v, int) and not isinstance(v, bool):
        return format_size(v).replace(" ", "")
    if isinstance(v, dict):
        return ",".join(f"{k}={x}" for k, x in v.items())
    if isinstance(v, list | tuple):
        return ",".join(map(str, v))
    return str(v)


def _dtype_name(d) -> str:

    try:
        return np.dtype(d).name
    except (TypeError, ValueError):
        return str(d)
