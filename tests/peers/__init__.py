"""The peers' own virtualenv, ``.venv-peers``, for the tests and benchmarks that read lovecraft's
outputs with another project's reader or measure against another project's writer and loader.

webdataset, MosaicML Streaming, litdata and datatrove would change ``.venv``'s packages (Streaming
imports torchvision, whose PyPI wheels need a CUDA torch; datatrove pins its own versions), so they
live in a venv of their own (``make .venv-peers``, pinned by ``tests/peers/constraints.txt``) and
are called as a subprocess; docs/design/peers.md says what is in it and what it costs.

    from tests.peers import require_peers, run_peer

    require_peers("streaming")  # skips the test, with the make command, when it is missing
    rows = run_peer(CODE, str(tmp_path))  # CODE prints json.dumps(...) as its last line

``LOVECRAFT_PEERS_VENV`` names another venv built by the same target (a git worktree can use
main's instead of building its own several GB).
"""

from __future__ import annotations

import functools
import json
import os
import subprocess
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PEERS_VENV = os.environ.get("LOVECRAFT_PEERS_VENV") or os.path.join(ROOT, ".venv-peers")
PEERS_PYTHON = os.path.join(PEERS_VENV, "bin", "python")
BUILD_HINT = "run `make .venv-peers` (docs/design/peers.md)"

# Variables of this process that would make the peers' interpreter import from elsewhere.
_DROP = ("PYTHONPATH", "PYTHONHOME", "PYTHONSTARTUP", "VIRTUAL_ENV", "PYTHONSAFEPATH")


class PeerError(RuntimeError):
    """A peer snippet failed: its exit status, or a last stdout line that is not JSON."""


def peer_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """The environment a peer snippet runs in: this one without what points Python at ``.venv``
    or this tree, with no user site-packages, no Hugging Face hub look-ups (nothing here may
    download), plus ``extra`` (an S3 endpoint, say)."""
    env = {k: v for k, v in os.environ.items() if k not in _DROP}
    env.update(PYTHONNOUSERSITE="1", HF_HUB_OFFLINE="1", TOKENIZERS_PARALLELISM="false")
    env.update(extra or {})
    return env


def run_peer(
    code: str, *args: str, timeout: float = 600, env: dict[str, str] | None = None, cwd: str | None = None
) -> object:
    """Run ``code`` in the peer venv and return the JSON value of the last line it prints.

    The code runs as a script file (``sys.argv[1:]`` are ``args``), so that multiprocessing's
    spawn and forkserver, which litdata's ``optimize`` and datatrove's executors use, can import
    it again in their workers: whatever starts processes goes under ``if __name__ ==
    "__main__":``. Peers print progress on stdout too, hence only the last non-empty line is
    parsed. ``env`` is added to :func:`peer_env`'s. A non-zero exit raises :class:`PeerError`
    with the end of the snippet's stderr."""
    if not os.path.exists(PEERS_PYTHON):
        raise PeerError(f"no peer venv at {PEERS_VENV}: {BUILD_HINT}")
    with tempfile.TemporaryDirectory(prefix="lovecraft-peer-") as tmp:
        script = os.path.join(tmp, "peer_snippet.py")
        with open(script, "w", encoding="utf-8") as f:
            f.write(code)
        r = subprocess.run(
            [PEERS_PYTHON, script, *args],
            capture_output=True,
            text=True,
            timeout=timeout,
            env=peer_env(env),
            cwd=cwd or tmp,
        )
    if r.returncode != 0:
        raise PeerError(f"peer snippet exited {r.returncode}; its stderr ends:\n{r.stderr[-6000:]}")
    lines = [ln for ln in r.stdout.splitlines() if ln.strip()]
    try:
        return json.loads(lines[-1])
    except (IndexError, json.JSONDecodeError) as e:
        raise PeerError(
            f"peer snippet printed no JSON on its last line ({e}); stdout ends:\n{r.stdout[-3000:]}\n"
            f"stderr ends:\n{r.stderr[-3000:]}"
        ) from None


@functools.cache
def peers_available(module: str | None = None) -> bool:
    """Whether the peer venv exists and, with ``module``, has it installed (found by its import
    system, without importing it: importing Streaming alone takes seconds; a package that is
    installed but does not load fails the snippet that uses it, with its traceback)."""
    if not os.path.exists(PEERS_PYTHON):
        return False
    if module is None:
        return True
    code = f"import importlib.util, sys; sys.exit(importlib.util.find_spec({module!r}) is None)"
    r = subprocess.run([PEERS_PYTHON, "-c", code], capture_output=True, timeout=120, env=peer_env())
    return r.returncode == 0


def install_failure() -> str | None:
    """Why `make` could not install the peers' venv (the end of pip's error and the disk's free
    space, which the Makefile keeps in .venv-peers.failed), on one line; None when it did not fail."""
    try:
        with open(os.path.join(ROOT, ".venv-peers.failed"), encoding="utf-8", errors="replace") as f:
            text = " ".join(f.read().split())
    except OSError:
        return None
    return f"`make` could not install it: {text}" if text else None


def require_peers(*modules: str) -> None:
    """Skip the calling test, saying how to build what is missing, unless the peer venv exists
    and has every one of ``modules`` installed."""
    import pytest

    if not peers_available():
        pytest.skip(f"the peers' venv is missing ({PEERS_VENV}): {install_failure() or BUILD_HINT}")
    missing = [m for m in modules if not peers_available(m)]
    if missing:
        pytest.skip(f"the peers' venv does not have {', '.join(missing)}: {BUILD_HINT}")


__all__ = ["PEERS_PYTHON", "PEERS_VENV", "PeerError", "peer_env", "peers_available", "require_peers", "run_peer"]
