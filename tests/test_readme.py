"""Every code block of README.md runs as written.

The ```sh/```bash/```shell and ```python blocks are run in order, in one temporary directory
holding a copy of sample_data/ (so the quickstart's paths resolve as they do in a checkout), with
`lovecraft` and `python` on PATH running this tree. A block that cannot run here (it installs
packages, needs a cluster or credentials) is marked in the README by an HTML comment right before
it, `<!-- no-test: the reason -->`; only those are skipped, and each must give its reason.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass

import pytest

from tests.conftest import ROOT, SUBPROCESS_ENV

README = os.path.join(ROOT, "README.md")
SHELLS = ("sh", "bash", "shell")
RUN = (*SHELLS, "python")
NO_TEST = re.compile(r"<!--\s*no-test:\s*(.*?)\s*-->")


@dataclass
class Block:
    lang: str
    code: str
    line: int  # of the opening fence
    skip: str | None  # the reason, when marked no-test


def code_blocks(text: str) -> list[Block]:
    """The fenced blocks of ``text`` (every language), each with the no-test reason before it."""
    out: list[Block] = []
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        m = re.match(r"^```(\w*)\s*$", lines[i])
        if not m:
            i += 1
            continue
        start = i
        j = i + 1
        while j < len(lines) and lines[j].strip() != "```":
            j += 1
        before = next((lines[k] for k in range(start - 1, -1, -1) if lines[k].strip()), "")
        reason = NO_TEST.search(before)
        out.append(Block(m.group(1), "\n".join(lines[start + 1 : j]) + "\n", start + 1, reason and reason.group(1)))
        i = j + 1
    return out


def readme_blocks() -> list[Block]:
    with open(README, encoding="utf-8") as f:
        return code_blocks(f.read())


def test_the_readme_has_blocks_to_run_and_every_skip_says_why():
    blocks = readme_blocks()
    runnable = [b for b in blocks if b.lang in RUN and not b.skip]
    assert len(runnable) >= 5, "the quickstart's blocks are gone"
    for b in blocks:
        assert b.lang, f"README.md line {b.line}: a code block without a language"
        if b.skip is not None:
            assert len(b.skip) > 10, f"README.md line {b.line}: no-test needs a reason"


def test_the_block_parser_sees_no_test_marks():
    text = "x\n<!-- no-test: needs a Ray cluster -->\n```sh\nray up\n```\n\n```python\nprint(1)\n```\n"
    a, b = code_blocks(text)
    assert (a.lang, a.skip, a.code) == ("sh", "needs a Ray cluster", "ray up\n")
    assert (b.lang, b.skip) == ("python", None)


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    d = tmp_path_factory.mktemp("readme")
    shutil.copytree(os.path.join(ROOT, "sample_data"), d / "sample_data")
    bin_dir = d / ".bin"
    bin_dir.mkdir()
    for name, target in (("lovecraft", f'"{sys.executable}" -m lovecraft_convert'), ("python", f'"{sys.executable}"')):
        p = bin_dir / name
        p.write_text(f'#!/bin/sh\nexec {target} "$@"\n')
        p.chmod(0o755)
    env = {**SUBPROCESS_ENV, "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}", "TF_CPP_MIN_LOG_LEVEL": "2"}
    return d, env


def test_every_readme_block_runs(workdir):
    """In order, as a reader would run them: later blocks read what earlier ones wrote."""
    d, env = workdir
    ran = 0
    for b in readme_blocks():
        if b.lang not in RUN or b.skip:
            continue
        argv = ["bash", "-euo", "pipefail", "-c", b.code] if b.lang in SHELLS else [sys.executable, "-c", b.code]
        r = subprocess.run(argv, cwd=d, env=env, capture_output=True, text=True, timeout=600)
        assert r.returncode == 0, f"README.md line {b.line} ({b.lang}) failed:\n{b.code}\n{r.stdout}\n{r.stderr}"
        ran += 1
    assert ran >= 5
