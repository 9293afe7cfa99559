"""The node-local cache of object-store pieces (storage/cache.py) against a real S3-protocol server:
one download per piece per node (threads and processes racing; GETs counted on the server), the
digest checked before a whole piece is used (a flipped byte fetched once more, then named), the
limit held (done pieces evicted first, pinned ones never), a killed download never trusted, a full
disk refused in one line, the cache emptied after a reboot."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import threading
import time

import pytest

from lovecraft_convert.errors import DatasetError
from lovecraft_convert.storage.cache import Cache, CacheError, Piece, parse_size

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def blake3_hex(data: bytes) -> str:
    from lovecraft_convert.runtime.hashing import new_hash

    h = new_hash("blake3")
    h.update(data)
    return h.hexdigest()


def put(s3, bucket: str, key: str, data: bytes) -> Piece:
    s3.put_object(Bucket=bucket, Key=key, Body=data)
    return Piece(f"s3://{bucket}/{key}", len(data), ("blake3", blake3_hex(data)))


def env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [ROOT, os.environ.get("PYTHONPATH")]))}


def cache_bytes(root: str) -> int:
    """What ``du`` would count of the cache's data: every file under it."""
    total = 0
    for d, _, files in os.walk(root):
        for f in files:
            try:
                total += os.path.getsize(os.path.join(d, f))
            except FileNotFoundError:
                pass
    return total


def test_parse_size():
    assert parse_size("4GiB") == 4 << 30
    assert parse_size("500MB") == 500 * 10**6
    assert parse_size("1.5g") == 3 << 29
    assert parse_size(1234) == 1234
    with pytest.raises(CacheError, match="is not a size"):
        parse_size("lots")
    with pytest.raises(CacheError, match="positive"):
        parse_size(0)


def test_whole_piece_downloaded_once_checked_and_reused(s3, bucket, s3_log, tmp_path):
    data = os.urandom(3 << 20)
    p = put(s3, bucket, "a.bin", data)
    s3_log.clear()
    c = Cache(str(tmp_path / "c"), 64 << 20)
    with c.get(p) as h:
        with open(h.path, "rb") as f:
            assert f.read() == data
        assert h.pread(10, 100) == data[100:110]
    with c.get(p) as h:  # a hit: nothing fetched
        assert h.pread(5, len(data) - 5) == data[-5:]
    assert len(s3_log.gets(bucket, "a.bin")) == 1
    assert c.usage() == len(data)
    assert os.listdir(c.partial) == []


def test_range_piece_is_its_bytes(s3, bucket, s3_log, tmp_path):
    data = os.urandom(1 << 20)
    whole = put(s3, bucket, "r.bin", data)
    p = Piece(whole.uri, whole.size, whole.digest, 1000, 5000)
    s3_log.clear()
    c = Cache(str(tmp_path / "c"), 64 << 20)
    with c.get(p) as h:
        assert os.path.getsize(h.path) == 4000
        assert h.pread(4000, 1000) == data[1000:5000]
    assert s3_log.gets(bucket, "r.bin") == [("r.bin", "bytes=1000-4999")]


def test_large_piece_fetched_in_parallel_parts(s3, bucket, s3_log, tmp_path):
    data = os.urandom(20 << 20)
    p = put(s3, bucket, "big.bin", data)
    s3_log.clear()
    c = Cache(str(tmp_path / "c"), 64 << 20)
    with c.get(p) as h, open(h.path, "rb") as f:
        assert f.read() == data
    assert sorted(r for _, r in s3_log.gets(bucket, "big.bin")) == sorted(
        ["bytes=0-8388607", "bytes=8388608-16777215", "bytes=16777216-20971519"]
    )


def test_flipped_byte_fetched_twice_then_named(s3, bucket, s3_log, tmp_path):
    data = bytearray(os.urandom(1 << 20))
    good = Piece(f"s3://{bucket}/flip.bin", len(data), ("blake3", blake3_hex(bytes(data))))
    data[12345] ^= 0x10
    s3.put_object(Bucket=bucket, Key="flip.bin", Body=bytes(data))
    s3_log.clear()
    c = Cache(str(tmp_path / "c"), 64 << 20)
    with pytest.raises(DatasetError) as e:
        c.get(good)
    msg = e.value.one_line()
    assert msg.startswith(f"s3://{bucket}/flip.bin: fetched twice, and both times its blake3 is ")
    assert f"the manifest says {good.digest[1]}" in msg and "\n" not in msg
    assert len(s3_log.gets(bucket, "flip.bin")) == 2
    assert os.listdir(c.objects) == [] and os.listdir(c.partial) == []


def test_a_changed_object_fixed_between_the_two_fetches_is_used(s3, bucket, tmp_path):
    """The second fetch is a real one: an object repaired on the store in between is accepted."""
    data = os.urandom(1 << 20)
    good = put(s3, bucket, "heal.bin", data)
    s3.put_object(Bucket=bucket, Key="heal.bin", Body=data[:-1] + bytes([data[-1] ^ 1]))
    c = Cache(str(tmp_path / "c"), 64 << 20)
    calls = []
    real = c._fetch_into

    def fetch(fd, piece):  # the store is repaired after the first (bad) download
        real(fd, piece)
        calls.append(1)
        if len(calls) == 1:
            s3.put_object(Bucket=bucket, Key="heal.bin", Body=data)

    c._fetch_into = fetch
    with c.get(good) as h, open(h.path, "rb") as f:
        assert f.read() == data
    assert len(calls) == 2


def test_a_shorter_object_is_named(s3, bucket, tmp_path):
    data = os.urandom(100_000)
    s3.put_object(Bucket=bucket, Key="short.bin", Body=data[:-10])
    p = Piece(f"s3://{bucket}/short.bin", len(data), ("blake3", blake3_hex(data)))
    with pytest.raises(DatasetError, match=rf"^s3://{bucket}/short.bin: the object ended at byte 99990, the manifest"):
        Cache(str(tmp_path / "c"), 64 << 20).get(p)


def test_limit_held_done_pieces_evicted_first_pinned_never(s3, bucket, tmp_path):
    pieces = [put(s3, bucket, f"p{i}", os.urandom(1 << 20)) for i in range(6)]
    c = Cache(str(tmp_path / "c"), (3 << 20) + 100)
    pinned = c.get(pieces[0])
    c.get(pieces[1]).release(done=False)  # read earlier, not marked done
    c.get(pieces[2]).release(done=True)
    assert c.usage() == 3 << 20
    c.get(pieces[3]).release(done=True)  # room made by evicting p2 (done), not p1 (older, not done)
    names = set(os.listdir(c.objects))
    assert pieces[2].key not in names and {pieces[0].key, pieces[1].key, pieces[3].key} <= names
    for p in pieces[4:]:
        c.get(p).release(done=True)
        assert c.usage() <= c.limit
    assert pieces[0].key in os.listdir(c.objects)  # pinned all along
    with open(pinned.path, "rb") as f:
        assert len(f.read()) == 1 << 20
    pinned.release()


def test_prefetch_never_goes_over_the_limit_demand_does_when_all_is_pinned(s3, bucket, tmp_path):
    pieces = [put(s3, bucket, f"q{i}", os.urandom(1 << 20)) for i in range(3)]
    c = Cache(str(tmp_path / "c"), (2 << 20) + 100)
    a, b = c.get(pieces[0]), c.get(pieces[1])
    assert c.get(pieces[2], demand=False) is None
    assert c.usage() == 2 << 20
    with c.get(pieces[2]) as h:  # the reader needs it now, the rest is in use: over the limit
        assert os.path.getsize(h.path) == 1 << 20
    a.release()
    b.release()
    assert c.get(pieces[2], demand=False) is not None


def test_lock_files_come_and_go_with_their_pieces(s3, bucket, tmp_path):
    """Many epochs through a small cache leave no lock file behind but those of the pieces it holds:
    none per download (``.dl``), none for a piece evicted, looked for (peek) or refused (a prefetch
    that does not fit). They were never removed before: 605 after a few epochs of a trial."""
    pieces = [put(s3, bucket, f"l{i}", os.urandom(1 << 20)) for i in range(8)]
    c = Cache(str(tmp_path / "c"), (2 << 20) + 100)
    for _ in range(3):
        for p in pieces:
            if (h := c.peek(p)) is not None:
                h.release()
            c.get(p).release(done=True)
    held = c.get(pieces[0]), c.get(pieces[1])
    assert c.get(pieces[2], demand=False) is None  # no room: refused
    assert c.peek(pieces[3]) is None
    assert sorted(os.listdir(c.locks)) == sorted(os.listdir(c.objects)) == sorted(p.key for p in pieces[:2])
    for h in held:
        h.release()
    c.clear()
    assert os.listdir(c.locks) == [] and os.listdir(c.objects) == []


def test_piece_larger_than_the_limit_is_named(s3, bucket, tmp_path):
    p = put(s3, bucket, "huge.bin", os.urandom(3 << 20))
    with pytest.raises(CacheError) as e:
        Cache(str(tmp_path / "c"), 1 << 20).get(p)
    assert e.value.one_line() == (
        f"s3://{bucket}/huge.bin: 3145728 bytes do not fit the cache limit of 1048576 bytes; raise the cache "
        "limit (cache_limit= or LOVECRAFT_CACHE_LIMIT) to 3145728 bytes or more (a whole file is read: with "
        "ranged=False, every file must fit)"
    )


def test_threads_racing_download_once(s3, bucket, s3_log, tmp_path):
    pieces = [put(s3, bucket, f"t{i}", os.urandom(2 << 20)) for i in range(4)]
    s3_log.clear()
    c = Cache(str(tmp_path / "c"), 64 << 20)
    errors = []
    go = threading.Barrier(6)

    def read():
        try:
            go.wait()
            for p in random.sample(pieces, len(pieces)):
                with c.get(p) as h:
                    assert os.path.getsize(h.path) == p.size
        except BaseException as e:  # noqa: BLE001
            errors.append(e)

    ts = [threading.Thread(target=read) for _ in range(6)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert errors == []
    for i in range(4):
        assert len(s3_log.gets(bucket, f"t{i}")) == 1


RACE = """
import os, sys, time
from lovecraft_convert.storage.cache import Cache, Piece
root, limit, start = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
pieces = [Piece(u, int(n), ("blake3", d)) for u, n, d in (a.split(",") for a in sys.argv[4:])]
c = Cache(root, limit)
while time.time() < start:
    time.sleep(0.001)
for p in pieces:
    with c.get(p) as h:
        assert os.path.getsize(h.path) == p.size
print("ok", c.gets)
"""


def test_processes_racing_download_each_piece_once(s3, bucket, s3_log, tmp_path):
    pieces = [put(s3, bucket, f"m{i}", os.urandom(3 << 20)) for i in range(4)]
    root = str(tmp_path / "shared")
    s3_log.clear()
    start = time.time() + 2.0
    args = [f"{p.uri},{p.size},{p.digest[1]}" for p in pieces]
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", RACE, root, str(64 << 20), str(start), *random.sample(args, len(args))],
            env=env(),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(4)
    ]
    outs = [p.communicate(timeout=120) for p in procs]
    assert [p.returncode for p in procs] == [0] * 4, outs
    assert sum(int(o.split()[1]) for o, _ in outs) == 4  # four downloads between the four processes
    for i in range(4):
        assert len(s3_log.gets(bucket, f"m{i}")) == 1


KILLED = """
import sys
from lovecraft_convert.storage import cache as cm
from lovecraft_convert.storage.cache import Cache, Piece
cm.CHUNK = 64 << 10  # small reads: the download takes long enough to be killed in the middle
c = Cache(sys.argv[1], 1 << 30, threads=1)
print("start", flush=True)
c.get(Piece(sys.argv[2], int(sys.argv[3]), ("blake3", sys.argv[4])))
print("done", flush=True)
"""


@pytest.mark.parametrize("trial", range(3))
def test_a_killed_download_is_never_trusted(s3, bucket, tmp_path, trial):
    data = os.urandom(24 << 20)
    p = put(s3, bucket, f"k{trial}.bin", data)
    root = str(tmp_path / "c")
    proc = subprocess.Popen(
        [sys.executable, "-c", KILLED, root, p.uri, str(p.size), p.digest[1]],
        env=env(),
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout.readline().strip() == "start"
    partial = os.path.join(root, "partial")
    deadline = time.time() + 60
    while not os.listdir(partial) and time.time() < deadline:
        time.sleep(0.002)
    time.sleep(random.uniform(0, 0.05))
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert os.listdir(os.path.join(root, "objects")) == []  # nothing half-written was renamed in
    c = Cache(root, 1 << 30)  # a new process's cache sweeps the dead one's partial file
    assert os.listdir(partial) == []
    with c.get(p) as h, open(h.path, "rb") as f:
        assert f.read() == data


def test_a_partial_file_of_a_live_download_is_not_swept(s3, bucket, tmp_path):
    c = Cache(str(tmp_path / "c"), 1 << 30)
    fd, tmp = c._reserve(Piece(f"s3://{bucket}/x", 1000, ("blake3", "00")), True)
    try:
        assert c.sweep() == 0 and os.path.exists(tmp)
    finally:
        os.close(fd)
    assert c.sweep() == 1 and not os.path.exists(tmp)


@pytest.fixture
def small_fs(tmp_path):
    mnt = str(tmp_path / "small")
    os.mkdir(mnt)
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=8m", "tmpfs", mnt], capture_output=True, text=True)
    if r.returncode != 0:
        pytest.skip(f"cannot mount an 8 MiB tmpfs here (needs root): {r.stderr.strip()}")
    try:
        yield mnt
    finally:
        if subprocess.run(["umount", mnt], capture_output=True).returncode != 0:
            subprocess.run(["umount", "-l", mnt], capture_output=True)


def test_full_disk_is_one_line_and_leaves_nothing(s3, bucket, small_fs):
    big = put(s3, bucket, "big12", os.urandom(12 << 20))
    c = Cache(os.path.join(small_fs, "cache"), 1 << 30)  # a limit the disk cannot hold
    with pytest.raises(CacheError) as e:
        c.get(big)
    assert e.value.one_line() == (
        f"s3://{bucket}/big12: no space left on device in the cache directory {c.root} (12582912 bytes needed); "
        "free space, lower the cache limit (cache_limit= or LOVECRAFT_CACHE_LIMIT) or choose another cache "
        "directory (cache_dir= or LOVECRAFT_CACHE)"
    )
    assert os.listdir(c.partial) == [] and os.listdir(c.objects) == []
    # what the disk can hold is cached; a piece not in use is evicted when the disk is full
    a, b = put(s3, bucket, "a5", os.urandom(5 << 20)), put(s3, bucket, "b5", os.urandom(5 << 20))
    c.get(a).release(done=True)
    with c.get(b) as h:
        assert os.path.getsize(h.path) == 5 << 20
    assert os.listdir(c.objects) == [b.key]


def test_a_reboot_empties_the_cache(s3, bucket, tmp_path):
    p = put(s3, bucket, "boot.bin", os.urandom(1000))
    root = str(tmp_path / "c")
    Cache(root, 1 << 30).get(p).release()
    assert Cache(root, 1 << 30).usage() == 1000  # the same boot: kept
    with open(os.path.join(root, ".boot"), "w") as f:
        f.write("another-boot")
    assert Cache(root, 1 << 30).usage() == 0


def test_unreachable_store_is_named(s3_server, tmp_path, monkeypatch):
    from lovecraft_convert.storage.base import StorageError
    from lovecraft_convert.storage.stores import drop_stores

    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:9")  # nothing listens on the discard port
    monkeypatch.setenv("LOVECRAFT_S3_ATTEMPTS", "2")
    monkeypatch.setenv("LOVECRAFT_S3_CONNECT_TIMEOUT", "1")
    drop_stores()
    try:
        with pytest.raises(StorageError) as e:
            Cache(str(tmp_path / "c"), 1 << 30).get(Piece("s3://nowhere/x.bin", 10, ("blake3", "00")))
    finally:
        drop_stores()
    assert e.value.one_line().startswith("s3://nowhere/x.bin: cannot connect to http://127.0.0.1:9; ")


def test_a_cache_directory_removed_between_opens_is_made_again(tmp_path):
    """A user clearing ~/.cache/lovecraft between two open_dataset calls of one process: the
    process's cache object kept the removed paths and the next read said the dataset was damaged
    (no such file in locks/). It is made again."""
    import shutil

    from lovecraft_convert.storage.cache import cache_at

    root = str(tmp_path / "c")
    first = cache_at(root, "1MiB")
    shutil.rmtree(root)
    again = cache_at(root, "1MiB")
    assert again is not first and os.path.isdir(again.locks) and os.path.isdir(again.objects)
    assert cache_at(root, "1MiB") is again
