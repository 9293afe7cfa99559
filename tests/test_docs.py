"""The documentation is current: it names every command and flag the CLI has, every input kind and
output format the registries hold, only test files and modules that exist, only command lines the
CLI parses, the benchmark table of bench/RESULTS.md; and the site builds offline with
``mkdocs build --strict``.

A new flag, input kind or format fails here until it is documented, which is the point: the place
to document it is docs/commands.md (flags), docs/inputs/<kind>.md, docs/outputs/<format>.md.
"""

from __future__ import annotations

import ast
import os
import re
import shlex
import subprocess
import sys

import click
import pytest

from tests.conftest import ROOT, SUBPROCESS_ENV

DOCS = os.path.join(ROOT, "docs")
PKG = os.path.join(ROOT, "lovecraft_convert")
README = os.path.join(ROOT, "README.md")
SHELLS = ("sh", "bash", "shell")


def _read(path: str) -> str:
    with open(path, encoding="utf-8") as f:
        return f.read()


def _pages() -> dict[str, str]:
    out = {}
    for dirpath, _dirs, files in os.walk(DOCS):
        for f in files:
            if f.endswith(".md"):
                path = os.path.join(dirpath, f)
                out[os.path.relpath(path, ROOT)] = _read(path)
    return out


PAGES = _pages()
ALL_DOCS = "\n".join(PAGES.values())


def _cli():
    from lovecraft_convert.cli import cli

    return cli


def _commands() -> dict[str, click.Command]:
    cli = _cli()
    return {name: cli.commands[name] for name in cli.list_commands(click.Context(cli))}


# --------------------------------------------------------------------------------------------
# every command and flag, every kind and format
# --------------------------------------------------------------------------------------------


def test_every_command_has_a_section():
    commands = _read(os.path.join(DOCS, "commands.md"))
    for name in _commands():
        assert re.search(rf"^## {name}$", commands, re.M), f"docs/commands.md: no '## {name}' section"


@pytest.mark.parametrize("name", sorted(_commands()))
def test_every_flag_is_documented(name):
    missing = []
    for p in _commands()[name].params:
        if isinstance(p, click.Option):
            long = [o for o in p.opts if o.startswith("--")]
            missing += [o for o in long if not re.search(rf"`{re.escape(o)}[ `=]", ALL_DOCS)]
    assert not missing, f"lovecraft {name}: flags not in docs/ (document them in docs/commands.md): {missing}"


def test_the_flag_check_finds_an_undocumented_flag():
    assert re.search(r"`--shard-size[ `=]", ALL_DOCS)
    assert not re.search(r"`--no-such-flag[ `=]", ALL_DOCS)


def test_every_input_kind_has_a_page_and_a_help_line():
    from lovecraft_convert.inputs import kinds

    for kind in kinds.names():
        assert os.path.exists(os.path.join(DOCS, "inputs", f"{kind}.md")), f"docs/inputs/{kind}.md is missing"
        assert kinds.HELP.get(kind), f"inputs/kinds.py: HELP has no line for '{kind}'"
        assert f"`{kind}`" in PAGES["docs/inputs/index.md"], f"docs/inputs/index.md: no row for '{kind}'"


def test_every_format_has_a_page_and_a_help_line():
    from lovecraft_convert.formats import HELP, builtin_names

    for name in builtin_names():
        assert os.path.exists(os.path.join(DOCS, "outputs", f"{name}.md")), f"docs/outputs/{name}.md is missing"
        assert HELP.get(name), f"formats/__init__.py: HELP has no line for '{name}'"
        assert f"`{name}`" in PAGES["docs/outputs/index.md"], f"docs/outputs/index.md: no row for '{name}'"


def test_help_lists_every_kind_and_format_from_the_registries():
    from lovecraft_convert.formats import builtin_names
    from lovecraft_convert.inputs import kinds

    for args in (["--help"], ["convert", "--help"]):
        out = subprocess.run(
            [sys.executable, "-m", "lovecraft_convert", *args], capture_output=True, text=True, env=SUBPROCESS_ENV
        )
        assert out.returncode == 0, out.stderr
        for name in (*kinds.names(), *builtin_names()):
            assert re.search(rf"^\s+{name}\s", out.stdout, re.M), f"lovecraft {' '.join(args)}: '{name}' not listed"
        assert "Examples:" in out.stdout


def test_convert_help_imports_nothing_heavy():
    code = (
        "import sys\n"
        "from lovecraft_convert.cli import cli\n"
        "try:\n"
        "    cli(['convert', '--help'], prog_name='lovecraft')\n"
        "except SystemExit:\n"
        "    pass\n"
        "print(','.join(m for m in ('numpy', 'pyarrow', 'h5py') if m in sys.modules), file=sys.stderr)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=SUBPROCESS_ENV)
    assert out.stderr.strip() == ""


# --------------------------------------------------------------------------------------------
# test files and modules the docs name exist
# --------------------------------------------------------------------------------------------

TEST_REF = re.compile(r"`(tests/[\w/]+\.py)(?:::(\w+))?`")


def _test_functions(path: str) -> set[str]:
    tree = ast.parse(_read(os.path.join(ROOT, path)))
    return {n.name for n in ast.walk(tree) if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)}


def test_every_test_the_guarantees_page_names_exists():
    page = PAGES["docs/guarantees.md"]
    rows = [line for line in page.splitlines() if line.startswith("| **")]
    assert len(rows) >= 15
    for row in rows:
        assert TEST_REF.search(row), f"docs/guarantees.md: a guarantee without a test: {row[:80]}"
    for m in TEST_REF.finditer(page):
        path, name = m.groups()
        assert os.path.isfile(os.path.join(ROOT, path)), f"docs/guarantees.md names {path}, which does not exist"
        if name:
            assert name in _test_functions(path), f"docs/guarantees.md names {path}::{name}, which does not exist"


@pytest.mark.parametrize("page", sorted(PAGES))
def test_files_a_page_names_exist(page):
    """Backticked paths ending in .py (tests/..., bench/..., or a module under lovecraft_convert/,
    written with or without the package prefix) exist: module paths in the docs go stale first."""
    missing = []
    for m in re.finditer(r"`([\w./]+\.py)(?:::(\w+))?[`:]", PAGES[page]):
        path, name = m.groups()
        candidates = [os.path.join(ROOT, path), os.path.join(PKG, path)]
        if not any(os.path.isfile(c) for c in candidates):
            missing.append(path)
        elif name and path.startswith("tests/") and name not in _test_functions(path):
            missing.append(f"{path}::{name}")
    assert not missing, f"{page} names files that do not exist: {missing}"


# --------------------------------------------------------------------------------------------
# command lines in the docs parse
# --------------------------------------------------------------------------------------------


def _blocks(text: str) -> list[tuple[str, str]]:
    return re.findall(r"^```(\w*)\n(.*?)^```", text, re.M | re.S)


def _lovecraft_lines(code: str) -> list[list[str]]:
    """Every `lovecraft ...` command of a shell block, continuations joined, as argv (after the
    command name)."""
    out = []
    for line in code.replace("\\\n", " ").splitlines():
        line = line.split(" | ")[-1].strip()
        if not line.startswith("lovecraft "):
            continue
        out.append(shlex.split(line, comments=True)[1:])
    return out


def _parse(argv: list[str]) -> None:
    """Parse ``lovecraft ARGV`` as Click would (types, choices, required options), running nothing;
    ``--help`` and ``--version`` are fine (Click exits after printing them, here into a buffer)."""
    if argv[0].startswith("-"):
        cmd, name, args = _cli(), "lovecraft", list(argv)
    else:
        cmd, name, args = _commands()[argv[0]], argv[0], list(argv[1:])
    if set(args) & {"--help", "-h", "--version"}:
        assert set(args) <= {"--help", "-h", "--version"}, f"lovecraft {shlex.join(argv)}"
        return
    cmd.make_context(name, args)


def _doc_command_lines() -> list[tuple[str, list[str]]]:
    out = []
    for page, text in [*PAGES.items(), ("README.md", _read(README))]:
        for lang, code in _blocks(text):
            if lang in SHELLS:
                out += [(page, argv) for argv in _lovecraft_lines(code)]
    return out


def test_every_command_line_in_the_docs_parses():
    lines = _doc_command_lines()
    assert len(lines) > 40
    bad = []
    for page, argv in lines:
        try:
            _parse(argv)
        except (click.UsageError, click.BadParameter, KeyError) as e:
            bad.append(f"{page}: lovecraft {shlex.join(argv)}: {e}")
    assert not bad, "\n".join(bad)


def test_the_parse_check_refuses_a_bad_flag():
    with pytest.raises(click.UsageError):
        _parse(["convert", "data.csv", "-o", "out/", "--to", "parquet", "--no-such-flag"])


def test_every_help_example_parses():
    for name, cmd in [("lovecraft", _cli()), *_commands().items()]:
        examples = [ln.strip() for ln in (cmd.epilog or "").splitlines() if ln.strip().startswith("lovecraft ")]
        assert 2 <= len(examples) <= 3, f"{name}: its help should end with two or three examples"
        for line in examples:
            _parse(shlex.split(line)[1:])


# --------------------------------------------------------------------------------------------
# the README and the benchmark table
# --------------------------------------------------------------------------------------------


def test_the_readme_is_a_page():
    assert os.path.getsize(README) < 12_500, "README.md has grown past ~12 KB: move the detail into docs/"


def test_the_readme_headline_is_bench_results():
    sys.path.insert(0, os.path.join(ROOT, "bench"))
    try:
        import results
    finally:
        sys.path.remove(os.path.join(ROOT, "bench"))
    readme = _read(README)
    expected = results.with_headline(readme, _read(results.RESULTS))
    assert readme == expected, (
        "README.md's benchmark table differs from bench/RESULTS.md: run bench/results.py --readme-only"
    )
    assert results.headline(_read(results.RESULTS)).count("\n") >= 5, "the headline table lost its rows"


def test_readme_links_into_docs_resolve():
    for target in re.findall(r"\]\(((?:docs|bench)/[^)#]+|CHANGELOG\.md)(?:#[^)]*)?\)", _read(README)):
        assert os.path.exists(os.path.join(ROOT, target)), f"README.md links to {target}, which does not exist"


# --------------------------------------------------------------------------------------------
# the site builds, offline, strictly
# --------------------------------------------------------------------------------------------


def test_mkdocs_build_strict(tmp_path):
    pytest.importorskip("mkdocs", reason="the docs extra (pip install '.[docs]') is not installed")
    pytest.importorskip("material", reason="the docs extra (mkdocs-material) is not installed")
    env = {**SUBPROCESS_ENV, "NO_MKDOCS_2_WARNING": "1"}
    r = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert r.returncode == 0, r.stdout + r.stderr
    assert (tmp_path / "site" / "reference" / "jobs" / "index.html").exists()
    html = (tmp_path / "site" / "reference" / "loaders" / "index.html").read_text(encoding="utf-8")
    assert "open_dataset" in html and ":class:" not in html
