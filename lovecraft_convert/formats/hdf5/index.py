"""``buckets.h5`` of a bucketed HDF5 dataset: one group per bucket, made of relative external links
to the bucket's files (nothing copied; the directory can be moved)."""

from __future__ import annotations

import os

from ...manifest import DEFAULT_HASH, MANIFEST_NAME
from ...runtime.durable import hash_fsynced
from ..checking import FileProblem, short
from ..writing import FileRecord
from .writer import create_file

INDEX_NAME = "buckets.h5"


def index_groups(buckets: list[dict]) -> dict[str, list[tuple[str, str]]]:
    """The groups of the HDF5 index for a manifest's ``buckets``: ``bucket-00003`` is the bucket's
    file, or a group holding one link per shard (``part-00000-of-00004``)."""
    groups = {}
    for bk in buckets:
        name = f"bucket-{bk['index']:05d}"
        files = [f for sh in bk["shards"] for f in sh["files"]]
        if len(files) == 1:
            groups[name] = [(name, files[0])]
        else:
            groups[name] = [(os.path.splitext(f)[0].removeprefix(name + "-"), f) for f in files]
    return groups


def write_bucket_index(
    path: str, groups: dict[str, list[tuple[str, str]]], attrs: dict[str, str], hash: str
) -> FileRecord:
    """An HDF5 file with one group per bucket, made of external links to the bucket's files.

    ``groups`` maps a group name to its ``(link name, file)`` pairs; a bucket of one file becomes
    that file's root group itself, a bucket of several shards a group of one linked group per
    shard. The links are relative, so the directory can be moved; HDF5 resolves them against the
    index's own directory. Nothing is copied, and the bytes depend only on the names (no times).
    """
    import h5py

    f = create_file(h5py, path, 1 << 20)
    try:
        gcpl = h5py.h5p.create(h5py.h5p.GROUP_CREATE)
        gcpl.set_obj_track_times(False)
        gcpl.set_link_creation_order(h5py.h5p.CRT_ORDER_TRACKED | h5py.h5p.CRT_ORDER_INDEXED)
        for name, links in groups.items():
            if len(links) == 1 and links[0][0] == name:
                f[name] = h5py.ExternalLink(links[0][1], "/")
                continue
            h5py.h5g.create(f.id, name.encode(), gcpl=gcpl)
            g = f[name]
            for link, target in links:
                g[link] = h5py.ExternalLink(target, "/")
        for k, v in attrs.items():
            f.attrs[k] = v
        f.flush()
    finally:
        f.close()
    return FileRecord(os.path.basename(path), 0, os.path.getsize(path), hash_fsynced(path, hash), hash)


def read_bucket_index(path: str) -> dict[str, list[tuple[str, str, str]]]:
    """The links of an index: group name -> ``(link name, file, path in file)`` (for ``verify``).
    A group that is itself a link is listed with its own name as the link name; anything other
    than a group of external links raises ``ValueError``."""
    import h5py

    out: dict[str, list[tuple[str, str, str]]] = {}
    with h5py.File(path, "r") as f:
        for name in f:
            link = f.get(name, getlink=True)
            if isinstance(link, h5py.ExternalLink):
                out[name] = [(name, link.filename, link.path)]
                continue
            if not isinstance(link, h5py.HardLink) or f.get(name, getclass=True) is not h5py.Group:
                raise ValueError(f"'{name}' is neither an external link nor a group of them")
            links = []
            for sub in f[name]:
                sl = f[name].get(sub, getlink=True)
                if not isinstance(sl, h5py.ExternalLink):
                    raise ValueError(f"'{name}/{sub}' is not an external link")
                links.append((sub, sl.filename, sl.path))
            out[name] = links
    return out


def write_for(directory: str, manifest: dict) -> dict:
    """Write ``buckets.h5`` for a bucketed dataset in ``directory``; its manifest entry."""
    import json

    groups = index_groups(manifest["buckets"])
    rec = write_bucket_index(
        os.path.join(directory, INDEX_NAME),
        groups,
        {
            "lovecraft_boundaries": json.dumps(manifest["bucketing"]["boundaries"]),
            "lovecraft_manifest": MANIFEST_NAME,
        },
        (manifest.get("options") or {}).get("hash") or DEFAULT_HASH,
    )
    return {"path": rec.path, "bytes": rec.bytes, rec.hash: rec.digest, "groups": list(groups)}


def check(full: str, p: str, buckets: list[dict]) -> list[FileProblem]:
    """The index holds one group per bucket and nothing but external links to the bucket's own
    files (never followed here: their targets are checked as the buckets' files)."""
    try:
        base = p.rsplit("/", 1)[0] + "/" if "/" in p else ""  # links are relative to the index's directory
        if base:  # (a dataset on an object store keeps its files under its run's prefix)
            buckets = [
                {**bk, "shards": [{**sh, "files": [f.removeprefix(base) for f in sh["files"]]} for sh in bk["shards"]]}
                for bk in buckets
            ]
        want = {g: [(n, f, "/") for n, f in links] for g, links in index_groups(buckets).items()}
    except (KeyError, TypeError, ValueError, AttributeError):
        return []  # the buckets' own problems are reported already
    try:
        got = read_bucket_index(full)
    except (OSError, ValueError) as e:
        return [FileProblem(p, f"not an index of the buckets ({short(e)})")]
    out = []
    for g in sorted(set(want) | set(got)):
        if g not in got:
            out.append(FileProblem(p, f"has no group '{g}'", "bucket"))
        elif g not in want:
            out.append(FileProblem(p, f"group '{g}' is not a bucket of the manifest", "bucket"))
        elif got[g] != want[g]:
            extra = [x for x in got[g] if x not in want[g]]
            if extra:
                n, f, path = extra[0]
                out.append(FileProblem(p, f"'{g}' links to {f}:{path} (as '{n}'), not to the bucket's files", "bucket"))
            else:
                missing = [x[1] for x in want[g] if x not in got[g]]
                what = missing[0] if missing else "its files in order"
                out.append(FileProblem(p, f"'{g}' does not link to {what}", "bucket"))
    return out
