"""The runtime: what a run needs from the process, below everything else.

* :mod:`.interrupts`: Ctrl-C and SIGTERM raised only at safe points, held across a commit;
  waits on queues, futures and threads that an interrupt cannot leave locked;
* :mod:`.readahead`: an iterator read in a thread of its own, boundedly ahead;
* :mod:`.hashing`: the hashes a manifest records (BLAKE3, SHA-256) and hashing a file;
* :mod:`.durable`: the hashing writer (direct I/O, fsync before a file counts), fsyncs of many
  files at once, preallocation;
* :mod:`.clock`: where a unit's time goes (seconds waiting on the object store, by kind).

Every layer above may use these (inputs read ahead, storage uploads under interrupts and hashes,
formats write durably); this layer imports nothing of the package but its errors and helpers
(tests/test_structure.py holds the layers).
"""
