"""What in an HDF5 file would make a reader open other files: external links, datasets kept in
external raw files, virtual datasets; and what lovecraft never writes (soft links, objects that are
no column). One walk, shared by the dataset reader (which refuses the first two kinds before
reading a row) and ``verify`` (which reports the worst of all). Nothing found is ever followed."""

from __future__ import annotations

import h5py

MAX_OBJECTS = 100_000

ELSEWHERE = 0  # an external link: another file's object
EXTERNAL = 1  # a dataset whose data is in other files (external raw storage, virtual)
SOFT = 2  # a soft link (lovecraft writes none)
STRAY = 3  # an object that is not a column of the schema
TOO_MANY = -1  # more objects than any file lovecraft writes holds (the walk stopped)


def survey(f: h5py.File, names: set[str]) -> list[tuple[int, str]]:
    """``(rank, message)`` of everything in ``f`` other than the datasets ``names`` at its root,
    the worst (lowest rank) first when sorted. External links are not followed, and a group is
    entered only through a hard link."""
    found: list[tuple[int, str]] = []
    todo = [("", f)]
    seen = 0
    while todo:
        prefix, g = todo.pop()
        for name in g:
            seen += 1
            if seen > MAX_OBJECTS:
                return [(TOO_MANY, f"holds over {MAX_OBJECTS} objects (refused)")]
            full = f"{prefix}/{name}" if prefix else name
            link = g.get(name, getlink=True)
            if isinstance(link, h5py.ExternalLink):
                found.append((ELSEWHERE, f"'{full}' is an external link to {link.filename}:{link.path} (not followed)"))
                continue
            if isinstance(link, h5py.SoftLink):
                found.append((SOFT, f"'{full}' is a soft link to {link.path} (lovecraft writes none)"))
                continue
            obj = g.get(name)
            if isinstance(obj, h5py.Group):
                todo.append((full, obj))
            elif isinstance(obj, h5py.Dataset):
                why = external_data(obj)
                if why:
                    found.append((EXTERNAL, f"dataset '{full}' {why} (not followed)"))
                    continue
            if prefix or name not in names:
                found.append((STRAY, f"holds '{full}', which is not a column of the schema"))
    return sorted(found)


def pointing_elsewhere(f: h5py.File, names: set[str]) -> str | None:
    """The first thing in ``f`` that would make reading it open another file, or None."""
    found = survey(f, names)
    return found[0][1] if found and found[0][0] <= EXTERNAL else None


def external_data(ds: h5py.Dataset) -> str | None:
    """Why reading ``ds`` would open other files (virtual dataset, external storage), or None."""
    try:
        if ds.is_virtual:
            return "is a virtual dataset mapping other files"
    except (AttributeError, RuntimeError, ValueError):
        pass
    try:
        if ds.id.get_create_plist().get_external_count():
            return "keeps its data in external raw files"
    except (AttributeError, RuntimeError, ValueError):
        pass
    return None
