"""megatron: Megatron-LM's indexed dataset, ``<prefix>.bin`` (tokens back to back) and
``<prefix>.idx`` (header, sequence lengths, pointers, document index; see :mod:`.idx`), one pair per
unit: ``data.bin``/``data.idx`` for convert, ``part-00000-of-00004.bin``/``.idx`` for shard,
``bucket-00003.bin``/``.idx`` for bucket. Read by Megatron-LM, NeMo and GPT-NeoX
(``megatron.core.datasets.indexed_dataset.IndexedDataset(prefix)``), by our reader for
``open_dataset``, checked by ``verify`` (the index against its ``.bin``) and described by
``inspect`` (any Megatron files, not only ours).

A Megatron dataset holds one column: token ids (a ``sequence`` column of one of Megatron's dtypes),
one document per sequence. Text becomes token ids with ``--tokenizer``.
"""

from __future__ import annotations

import os

from ...manifest import DTYPE, POSITIVE, Obj
from ..base import OutputFormat, py_str


class MegatronFormat(OutputFormat):
    name = "megatron"
    title = "Megatron-LM indexed dataset (.bin + .idx per shard), read with megatron.core IndexedDataset"
    extensions = (".bin", ".idx")
    random_access = True
    manifest_keys = ("megatron",)
    manifest_spec = Obj({}, {"megatron": Obj({"dtype": DTYPE, "dtype_code": POSITIVE})})
    kinds = ("sequence",)

    def writer_class(self):
        from .writer import MegatronWriter

        return MegatronWriter

    def check_schema(self, schema, source, input_format=None):
        from ...errors import SchemaError
        from ...schema import BINARY, SEQUENCE, STRING
        from .idx import code_of, dtype_names

        for f in schema:
            if f.kind in (STRING, BINARY):
                raise SchemaError(
                    f"{source}, column '{f.name}': {self.name} holds token ids, not text",
                    hint=f"tokenize it with --tokenizer bytes|chars|tokenizer.json"
                    f"{'' if f.name == 'text' else f' --column {f.name}'}",
                )
        for f in schema:
            if f.kind != SEQUENCE:
                raise SchemaError(
                    f"{source}, column '{f.name}': {self.name} holds one column of token ids, not {f.describe()} columns",
                    hint="leave the column out (with --tokenizer, the output is the tokens and the columns --columns "
                    "names), or write another format",
                )
        if len(schema) != 1:
            raise SchemaError(
                f"{source}: {self.name} holds one column of token ids; this output has {len(schema)} "
                f"({', '.join(schema.names)})",
                hint="keep only the tokens (with --tokenizer, do not name other columns in --columns)",
            )
        f = schema.fields[0]
        if code_of(f.np_dtype) is None:
            raise SchemaError(
                f"{source}, column '{f.name}': {self.name} has no {f.np_dtype.name} tokens",
                hint=f"it stores {dtype_names()}",
            )

    def size_linear(self, compression):
        return True

    def manifest_problems(self, manifest):
        from .check import manifest_problems

        return manifest_problems(manifest)

    def most_rows(self, sizes, entries, schema, manifest):
        from .idx import index_bytes

        idx = [size for size, e in zip(sizes, entries, strict=True) if str(e.get("path", "")).endswith(".idx")]
        if len(idx) != 1:
            return None  # open_part says what is wrong
        return max(0, (idx[0] - index_bytes(0, 1)) // (index_bytes(1, 2) - index_bytes(0, 1)))

    def open_part(self, files, manifest, shared):
        from ...errors import DatasetError
        from .reader import MegatronReader

        bins = [p for p in files.paths if p.endswith(".bin")]
        idxs = [p for p in files.paths if p.endswith(".idx")]
        if len(bins) != 1 or len(idxs) != 1:
            raise DatasetError(
                f"shard {files.key[1]} lists {len(bins)} .bin and {len(idxs)} .idx files, expected one of each",
                hint="re-create the dataset",
                kind="manifest",
            )
        return MegatronReader(files.rows, files.schema, bins[0], idxs[0])

    def check_unit(self, ctx, unit, schema):
        from .check import check_unit

        return check_unit(ctx, unit, schema)

    def stat_file(self, ctx, unit, column, key):
        from .check import unit_files

        b, i = unit_files(unit)
        return i if key.startswith("length") or key == "count" else b

    def load_snippets(self, path, manifest):
        files = [f for f in manifest.get("files") or [] if isinstance(f, dict)]
        prefixes = [os.path.join(path, f["path"][: -len(".idx")]) for f in files if str(f.get("path")).endswith(".idx")]
        if len(prefixes) == 1:
            mc = [
                "from megatron.core.datasets.indexed_dataset import IndexedDataset",
                "",
                f"ds = IndexedDataset({py_str(prefixes[0])})  # .bin + .idx",
                "tokens = ds[0]  # the first document's token ids",
            ]
            blend = f"--data-path {prefixes[0]}"
        else:
            mc = [
                "from megatron.core.datasets.indexed_dataset import IndexedDataset",
                "",
                f"shards = [IndexedDataset(p) for p in {prefixes!r}]",
                "tokens = shards[0][0]  # the first document's token ids",
            ]
            blend = "--data-path " + " ".join(f"1 {p}" for p in prefixes[:3]) + (" ..." if len(prefixes) > 3 else "")
        mc.append(f"# Megatron-LM training: {blend}")
        return {"megatron-core": "\n".join(mc)}

    def claims_file(self, path):
        from .rawfile import prefix_of

        return prefix_of(path) is not None

    def inspect_files(self, paths, *, sample, max_expansion):
        from .rawfile import inspect_megatron

        return inspect_megatron(paths, sample)

    def format_file_report(self, report):
        from .rawfile import format_report

        return format_report(report)


FORMAT = MegatronFormat()
