"""`make bench --only tokens`: the LLM token pipeline, corpus -> Megatron ``.bin``/``.idx``.

On a ~100 MB corpus (one document per line; JSON Lines ``{"text": ...}`` when the installed
package reads JSON Lines) and a BPE ``tokenizer.json`` of 8,000 tokens trained on it, ``convert
--tokenizer tok.json --eos '</s>' --to megatron`` and ``shard ... --workers 2`` against:

* Hugging Face ``datasets`` doing the same work the way its users do: ``load_dataset`` of the
  file, a batched ``map`` with the tokenizer's ``encode_batch`` (ids + EOS) and ``num_proc`` = the
  cores, ``save_to_disk`` (target >= 1.5x);
* the tokenizer's own ``encode_batch`` over the same texts in one process, nothing written (the
  limit: the tokenizer's speed; target >= 0.9x).

Peak anonymous memory of both of ours at two corpus sizes (the corpus and twice it).
Called from ``lovecraft_bench.py`` with that module (its ``run``, ``Row``, ``mbps``...) as ``lb``.
"""

from __future__ import annotations

import json
import os
import subprocess
import types

TOKENS_PEERS = {
    # Hugging Face datasets as its users run it: load_dataset, batched map with num_proc, save_to_disk
    "datasets": (
        "import os, sys\n"
        "from datasets import load_dataset\n"
        "from tokenizers import Tokenizer\n"
        "src, path, out, kind = sys.argv[1:5]\n"
        "tok = Tokenizer.from_file(path)\n"
        "eos = tok.token_to_id('</s>')\n"
        "ds = load_dataset(kind, data_files=src, split='train', cache_dir=out + '/cache')\n"
        "def encode(batch):\n"
        "    return {'input_ids': [e.ids + [eos] for e in tok.encode_batch(batch['text'])]}\n"
        "ds = ds.map(encode, batched=True, num_proc=os.cpu_count(), remove_columns=ds.column_names)\n"
        "ds.save_to_disk(out + '/saved')\n"
    ),
    "encode_batch_json": (
        "import sys, json\n"
        "from tokenizers import Tokenizer\n"
        "tok = Tokenizer.from_file(sys.argv[2])\n"
        "with open(sys.argv[1], encoding='utf-8') as f:\n"
        "    while lines := f.readlines(16 << 20):\n"
        "        tok.encode_batch([json.loads(x)['text'] for x in lines])\n"
    ),
}


def jsonl_readable(lb: types.ModuleType) -> bool:
    """Whether the package the bench runs (``python -m lovecraft_convert`` from the working
    directory) reads JSON Lines (the inputs/jsonl.py reader)."""
    probe = "import importlib.util as u, sys; sys.exit(u.find_spec('lovecraft_convert.inputs.jsonl') is None)"
    return subprocess.run([lb.PY, "-c", probe], capture_output=True).returncode == 0


def make_corpus(lb: types.ModuleType, work: str, target: int, jsonl: bool) -> str:
    """~target bytes of documents, one a line (the bench's text generator, cut at a line end), or
    the same documents as JSON Lines ``{"text": ...}``."""
    mb = target // 10**6
    txt = os.path.join(work, f"tokens_{mb}MB.txt")
    if not os.path.exists(txt):
        big = lb.make_text(os.path.join(work, f"tokens_gen_{mb}MB.txt"), target)
        with open(big, "rb") as f, open(txt + ".tmp", "wb") as g:
            data = f.read(target)
            g.write(data[: data.rfind(b"\n") + 1])
        os.rename(txt + ".tmp", txt)
        os.remove(big)
    if not jsonl:
        return txt
    path = os.path.join(work, f"tokens_{mb}MB.jsonl")
    if not os.path.exists(path):
        with open(txt, encoding="utf-8") as f, open(path + ".tmp", "w", encoding="utf-8") as g:
            for line in f:
                g.write(json.dumps({"text": line.rstrip("\n")}, ensure_ascii=False) + "\n")
        os.rename(path + ".tmp", path)
    return path


def bench_tokens(b, size: int, lb: types.ModuleType) -> None:
    jsonl = jsonl_readable(lb)
    kind = "json" if jsonl else "text"
    target = size // 10  # ~100 MB (6 MB with --quick)
    src = make_corpus(lb, b.work, target, jsonl)
    text = make_corpus(lb, b.work, target, False)
    tok = lb.make_tokenizer(os.path.join(b.work, "tokenizer_8k_eos.json"), text, ("[UNK]", "[PAD]", "</s>"))
    n = os.path.getsize(src)
    label = "JSONL" if jsonl else "text"
    env = {"HF_DATASETS_OFFLINE": "1", "HF_HUB_OFFLINE": "1", "HF_DATASETS_DISABLE_PROGRESS_BARS": "1"}

    def ours(command: str, *extra: str):
        return lambda: [*lb.LOVECRAFT, command, src, "-o", b.out(f"tok_{command}"), "--tokenizer", tok,
                        "--eos", "</s>", "--to", "megatron", "-q", *extra]  # fmt: skip

    def peer(name: str, *args: str):
        return [lb.PY, "-c", TOKENS_PEERS[name], *args]

    res = b.rounds(
        {
            "convert": ours("convert"),
            "shard": ours("shard", "--workers", "2", "--num-shards", "4"),
            "datasets": lambda: peer("datasets", src, tok, b.fresh_dir("tok_datasets"), kind),
            # text: lovecraft_bench's own encode_batch peer (the same lines through encode_batch)
            "encode": lambda: peer("encode_batch_json", src, tok) if jsonl else lb.peer("encode_batch", src, tok),
        },
        env=env,
    )
    peaks = {k: max(r.peak_mib for r in v) - b.baseline for k, v in res.items()}
    what = f"{label} -> Megatron .bin/.idx, BPE 8k + EOS, {n / 1e6:.0f} MB"
    for k, cmd in (("convert", "convert"), ("shard", "shard --workers 2")):
        b.rows.append(
            lb.Row(
                f"{what}: {cmd}",
                lb.mbps(n, res[k]),
                f"datasets load_dataset({kind!r}) + map(batched, num_proc={os.cpu_count()}) + save_to_disk",
                lb.mbps(n, res["datasets"]),
                1.5,
                f"peaks: ours {peaks[k]:.0f} MiB, datasets {peaks['datasets']:.0f} MiB",
            )
        )
        b.rows.append(
            lb.Row(
                f"{what}: {cmd}",
                lb.mbps(n, res[k]),
                "tokenizers encode_batch over the same texts, one process",
                lb.mbps(n, res["encode"]),
                0.9,
            )
        )
    # peak anonymous memory at two corpus sizes, both past what fills the budget's buffers (a quarter
    # of the corpus does not: 25 MB is one part, one worker busy)
    sizes = (target, 2 * target)
    lines = [
        "",
        f"Token pipeline, peak anonymous memory above the baseline ({b.baseline:.0f} MiB), one run each:",
        "",
        f"| command | @{sizes[0] / 1e6:.0f} MB | @{sizes[1] / 1e6:.0f} MB | difference | time |",
        "|---|---:|---:|---:|---|",
    ]
    for name, extra in (("convert", ()), ("shard", ("--workers", "2", "--num-shards", "4"))):
        rs = []
        for s in sizes:
            path = make_corpus(lb, b.work, s, jsonl)
            cmd = [*lb.LOVECRAFT, name, path, "-o", b.out("tok_mem"), "--tokenizer", tok, "--eos", "</s>",
                   "--to", "megatron", "-q", *extra]  # fmt: skip
            rs.append(lb.run(cmd))
        a, c = (r.peak_mib - b.baseline for r in rs)
        lines.append(
            f"| {label} -> megatron, {name} {' '.join(extra)} | {a:.0f} MiB | {c:.0f} MiB | {c - a:+.0f} MiB | "
            f"{rs[0].seconds:.1f}s / {rs[1].seconds:.1f}s |"
        )
    b.extra.extend(lines)
