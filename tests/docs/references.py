"""What the docs point at must exist: links, "see <section>" pointers, paths and command lines.

The checks read text only (nothing is fetched, nothing runs); each returns the problems it found
as ``"<file>:<line>: <what>"`` strings, so a test of the checks can feed them broken text:

* :func:`link_problems` — every relative Markdown link of a page resolves to a file, and its
  ``#anchor`` to a heading of that page (the site's slugs: ``markdown``'s ``toc`` extension);
* :func:`pointer_problems` — every quoted section pointer resolves to a heading: ``see "X"`` on
  a page (a heading of the same page), ``README, "X"`` / ``docs/PAGE.md, "X"`` /
  ``[text](PAGE.md), "X"`` anywhere (a heading of that page); a trailing ``...`` matches a
  heading's start;
* :func:`path_problems` — every repository path a text names (``docs/x.md``,
  ``evolve_envs/.../x.py``, ``deploy/...``, ``bench/...``, ``tests/...``) exists;
* :func:`command_problems` — every ``evolve-envs``, ``evolve-reward-server`` and
  ``evolve-reward-launch`` command line (bash blocks and inline code of a page, comment lines of
  a config) parses with the program's real argument parser: its subcommand and flags exist and
  their values are accepted (``<placeholder>`` values stand for a valid choice).

Example:
    >>> page = ROOT / "docs" / "x.md"
    >>> link_problems(page, "see [the start](getting-started.md#no-such-heading)")
    ['docs/x.md:1: link getting-started.md#no-such-heading: no heading with that anchor']
    >>> command_problems(page, "```bash\\nevolve-envs train --minuets 5\\n```")[0].split("`: ")[-1]
    'unrecognized arguments: --minuets'
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import io
import re
import shlex
from collections.abc import Callable, Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

PROGRAMS = ("evolve-envs", "evolve-reward-server", "evolve-reward-launch")


def doc_pages() -> list[Path]:
    """The README and every page of docs/ (the site's pages), and bench/RESULTS.md."""
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
    return [*pages, ROOT / "bench" / "RESULTS.md"]


def source_files() -> list[Path]:
    """Files whose docstrings and comments point at docs: the package, configs, benches,
    examples, the deploy manifests and the Makefile."""
    files = [ROOT / "Makefile", ROOT / "setup.cfg"]
    for top, exts in (
        ("evolve_envs", ("*.py", "*.yaml")),
        ("bench", ("*.py",)),
        ("examples", ("*.py",)),
        ("deploy", ("*.yaml",)),
        ("scripts", ("*.sh", "*.py")),
    ):
        for ext in exts:
            files += sorted((ROOT / top).rglob(ext))
    return [f for f in files if f.is_file()]


def _rel(path: Path) -> str:
    try:
        return str(path.relative_to(ROOT))
    except ValueError:
        return str(path)


def _line(text: str, pos: int) -> int:
    return text.count("\n", 0, pos) + 1


def _blank_code(text: str) -> str:
    """``text`` with fenced code blocks and inline code spans blanked out (offsets kept)."""

    def blank(m: re.Match[str]) -> str:
        return re.sub(r"[^\n]", " ", m.group(0))

    text = re.sub(r"^[ \t]*```.*?^[ \t]*```", blank, text, flags=re.M | re.S)
    return re.sub(r"`[^`\n]*`", blank, text)


# --------------------------------------------------------------------------- headings


def slugify(title: str) -> str:
    """The anchor the site gives a heading (``markdown``'s ``toc`` extension, as mkdocs uses).

    >>> slugify("Online alarm and audited termination"), slugify("`info` keys")
    ('online-alarm-and-audited-termination', 'info-keys')
    """
    from markdown.extensions.toc import slugify as toc_slugify

    return toc_slugify(re.sub(r"[`*]", "", title), "-")


def titles(text: str) -> tuple[str, ...]:
    """The titles of a Markdown text's headings (fenced code skipped), in order."""
    text = re.sub(r"^[ \t]*```.*?^[ \t]*```", "", text, flags=re.M | re.S)
    return tuple(m.group(1).strip() for m in re.finditer(r"^#{1,6}\s+(.+?)\s*#*$", text, re.M))


@functools.cache
def headings(page: Path) -> tuple[str, ...]:
    """The titles of a Markdown page's headings."""
    return titles(page.read_text())


def _has_heading(page: Path | tuple[str, ...], title: str) -> bool:
    """Whether a page (or these titles) has the heading ``title`` (``...`` at its end: a
    heading that starts so)."""
    want = re.sub(r"[`*]", "", title).strip().rstrip(".").strip()
    prefix = title.rstrip().endswith(("...", "…"))
    want = want.rstrip(".… ").lower()
    for h in headings(page) if isinstance(page, Path) else page:
        have = re.sub(r"[`*]", "", h).strip().lower()
        if have == want or (prefix and have.startswith(want)):
            return True
    return False


def _has_anchor(page: Path | tuple[str, ...], anchor: str) -> bool:
    return anchor in {slugify(h) for h in (headings(page) if isinstance(page, Path) else page)}


# --------------------------------------------------------------------------- links

LINK = re.compile(r"(?<!!)\[[^\]\n]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")


def link_problems(page: Path, text: str | None = None) -> list[str]:
    """Relative links of a Markdown page that point nowhere (files, then anchors)."""
    text = page.read_text() if text is None else text
    problems = []
    for m in LINK.finditer(_blank_code(text)):
        target = m.group(1)
        if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # http:, https:, mailto:
            continue
        path_part, _, anchor = target.partition("#")
        where = f"{_rel(page)}:{_line(text, m.start())}: link {target}"
        if not path_part:  # an anchor on this page
            if not _has_anchor(titles(text), anchor):
                problems.append(f"{where}: no heading with that anchor")
            continue
        dest = (page.parent / path_part).resolve()
        if not dest.exists():
            problems.append(f"{where}: no such file")
        elif anchor and dest.suffix == ".md" and not _has_anchor(dest, anchor):
            problems.append(f"{where}: no heading with that anchor")
    return problems


# --------------------------------------------------------------------------- pointers

_SEP = r"(?:[\s#*]|\"\"\")+"  # a pointer may wrap lines, in comments and docstrings too
_QUOTE = r"[\"“]([^\"”]{2,90}?)[\"”]"
_PAGE = r"(?P<page>README|docs/[\w./-]+\.md|\]\((?P<link>[^)#\s]+\.md)(?:#[^)\s]*)?\))"
POINTER_TO_PAGE = re.compile(
    _PAGE + r"(?:'s)?,?(?:[\s#*(]|\"\"\")+(?:sections?" + _SEP + r")?" + _QUOTE
)
#: ``"X" in docs/PAGE.md``, ``"X" in [the page](page.md)``
POINTER_IN_PAGE = re.compile(_QUOTE + _SEP + r"(?:of|in)" + _SEP + r"(?:the" + _SEP + r")?" + _PAGE)
BARE_SEE = re.compile(
    r"\b[Ss]ee" + _SEP + r"(?:the" + _SEP + r")?(?:section" + _SEP + r")?" + _QUOTE
)


def _title(raw: str) -> str:
    """A quoted title as one line (a pointer that wraps carries comment marks)."""
    return re.sub(r"(?:\s|#|\*)+", " ", raw).strip()


def _page_of(name: str, link: str | None, base: Path) -> Path:
    if link:
        return (base.parent / link).resolve()
    if name == "README":
        return ROOT / "README.md"
    return ROOT / name


def pointer_problems(path: Path, text: str | None = None) -> list[str]:
    """Quoted section pointers that name no heading (see the module docstring)."""
    text = path.read_text(errors="replace") if text is None else text
    markdown = path.suffix == ".md"
    body = _blank_code(text) if markdown else text
    problems = []
    claimed: set[int] = set()
    found = [(m, 3) for m in POINTER_TO_PAGE.finditer(body)]
    found += [(m, 1) for m in POINTER_IN_PAGE.finditer(body)]
    for m, group in found:
        page = _page_of(m.group("page"), m.group("link"), path)
        title = _title(m.group(group))
        claimed.add(m.start(group))
        where = f"{_rel(path)}:{_line(body, m.start())}"
        if not page.is_file():
            problems.append(f"{where}: pointer to {m.group('page')}: no such page")
        elif not _has_heading(page, title):
            problems.append(f'{where}: "{title}": no such heading in {_rel(page)}')
    if markdown:
        own = titles(text)
        for m in BARE_SEE.finditer(body):
            title = _title(m.group(1))
            if m.start(1) not in claimed and not _has_heading(own, title):
                problems.append(
                    f'{_rel(path)}:{_line(body, m.start())}: see "{title}": no such heading on '
                    "this page (link the page that has it)"
                )
    return problems


# --------------------------------------------------------------------------- paths

PATH = re.compile(
    r"(?<![\w/.-])((?:docs|evolve_envs|deploy|bench|tests|examples|scripts)/"
    r"[\w./-]*[\w-]\.(?:md|py|yaml|yml|png|sh|json|toml))\b"
)


#: paths of other projects the text names (RLinf's examples) and name templates
FOREIGN_PATHS = ("examples/embodiment/", "bench/pN_")


def path_problems(path: Path, text: str | None = None) -> list[str]:
    """Repository paths a text names that do not exist (globs and placeholders skipped)."""
    text = path.read_text(errors="replace") if text is None else text
    problems = []
    for m in PATH.finditer(text):
        target = m.group(1)
        if any(c in target for c in "*<>{}$") or target.startswith(FOREIGN_PATHS):
            continue
        if not (ROOT / target).exists():
            problems.append(f"{_rel(path)}:{_line(text, m.start())}: {target}: no such file")
    return problems


# --------------------------------------------------------------------------- commands


@functools.cache
def parsers() -> dict[str, argparse.ArgumentParser]:
    """The real argument parsers of the three programs."""
    from evolve_envs.cli.launch import build_parser as launch_parser
    from evolve_envs.cli.main import _build_parser
    from evolve_envs.reward.service.hosting.serve_options import build_parser as serve_parser

    return {
        "evolve-envs": _build_parser(),
        "evolve-reward-server": serve_parser(),
        "evolve-reward-launch": launch_parser(),
    }


def _code_snippets(path: Path, text: str) -> Iterator[tuple[int, str, bool]]:
    """(line, shell text, strict) of a file's command lines. Strict: a Markdown page's bash
    blocks and the Makefile's recipes, whole commands; not strict: inline code and comment or
    docstring lines, which may show a command in part (`evolve-envs train --address`)."""
    if path.suffix == ".md":
        for m in re.finditer(r"^([ \t]*)```(\w*)[^\n]*\n(.*?)^[ \t]*```", text, re.M | re.S):
            if m.group(2) in ("bash", "sh", "shell", "console"):
                yield _line(text, m.start(3)), m.group(3), True
        for m in re.finditer(r"`([^`\n]+)`", _blank_fences(text)):
            yield _line(text, m.start()), m.group(1), False
        return
    strict = path.name == "Makefile"
    lines = text.splitlines()
    for i, line in enumerate(lines, 1):
        stripped = re.sub(r"^\s*(#|//|\*)?\s*(\$\(BIN\)/)?", "", line)
        if any(stripped.startswith(p + " ") for p in PROGRAMS):
            joined, k = stripped, i
            while joined.rstrip().endswith("\\") and k < len(lines):
                joined = joined.rstrip()[:-1] + " " + re.sub(r"^\s*#?\s*", "", lines[k])
                k += 1
            yield i, joined, strict


def _blank_fences(text: str) -> str:
    return re.sub(
        r"^[ \t]*```.*?^[ \t]*```", lambda m: re.sub(r"[^\n]", " ", m.group(0)), text,
        flags=re.M | re.S,
    )  # fmt: skip


_SEPARATORS = ("|", "||", "&&", ";", "&", "(", ")", "$(")
_PREFIXES = ("time", "sudo", "exec", "nohup", "env", "$")  # words before a command
_REDIRECT = re.compile(r"^\d*(?:>>?|<)(?:&\d)?$")


def command_lines(path: Path, text: str | None = None) -> Iterator[tuple[int, list[str], bool]]:
    """(line, argv from the program's name on, strict) of every command line in a file."""
    text = path.read_text(errors="replace") if text is None else text
    for line, snippet, strict in _code_snippets(path, text):
        snippet = re.sub(r"\\\n", " ", snippet)
        for k, raw in enumerate(snippet.splitlines()):
            if not any(p in raw for p in PROGRAMS):
                continue
            try:
                lexer = shlex.shlex(raw, posix=True, punctuation_chars="|&;()")
                lexer.whitespace_split = True
                lexer.commenters = "#"
                tokens = list(lexer)
            except ValueError:
                continue  # unbalanced quotes: prose, not a command
            segment: list[str] | None = None
            skip, head = False, True  # head: before a segment's command word
            for tok in [*tokens, ";"]:
                if skip:
                    skip = False
                elif tok in _SEPARATORS:
                    if segment is not None:
                        yield line + k, segment, strict
                    segment, head = None, True
                elif segment is None and not head:
                    continue  # an argument of another command (`pip install evolve-envs`)
                elif segment is not None:
                    if _REDIRECT.match(tok):  # `2> refused.txt`: the shell's, not the program's
                        skip = not tok.endswith(("&1", "&2"))
                    else:
                        segment.append(tok)
                elif tok.rsplit("/", 1)[-1] in PROGRAMS:  # .venv/bin/evolve-envs too
                    segment = [tok.rsplit("/", 1)[-1]]
                elif not (re.match(r"^\w+=", tok) or tok in _PREFIXES):
                    head = False


def _placeholders(parser: argparse.ArgumentParser, argv: list[str]) -> list[str]:
    """``argv`` with ``...`` dropped and ``<placeholder>`` values of choice options replaced
    by a valid choice."""
    options = {s: a for a in _all_actions(parser) for s in a.option_strings}
    out: list[str] = []
    for tok in argv:
        if tok in ("...", "…"):
            continue
        if re.fullmatch(r"<[^<>]+>", tok) and out and out[-1] in options:
            choices = options[out[-1]].choices
            if choices:
                tok = str(next(iter(choices)))
        out.append(tok)
    return out


def _all_actions(parser: argparse.ArgumentParser) -> Iterator[argparse.Action]:
    for action in parser._actions:
        yield action
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                yield from _all_actions(sub)


def _subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def parse_error(program: str, argv: list[str]) -> str | None:
    """Why ``program argv`` does not parse (None: it does), as the program would say."""
    parser = parsers()[program]
    argv = _placeholders(parser, argv)
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            args, extra = parser.parse_known_args(argv)
    except SystemExit as exc:
        if exc.code in (0, None):  # --help
            return None
        lines = [x for x in err.getvalue().strip().splitlines() if x.strip()]
        return lines[-1].split("error: ", 1)[-1] if lines else f"exit {exc.code}"
    overrides = all("=" in x and not x.startswith("-") for x in extra)
    if extra and hasattr(args, "overrides") and overrides:
        return None  # KEY=VALUE overrides between options, as main() takes them
    if extra:
        return f"unrecognized arguments: {' '.join(extra)}"
    return None


def flag_error(program: str, argv: list[str]) -> str | None:
    """For a command shown in part: whether its subcommand and its ``--flags`` exist."""
    parser = parsers()[program]
    subs = _subparsers(parser)
    if subs:
        if not argv or argv[0].startswith("-"):
            return None  # `evolve-envs --debug`, or the program named alone
        if argv[0].endswith(":"):
            return None  # an output line: `evolve-envs rollout: error: ...`
        if argv[0] not in subs:
            return f"no subcommand {argv[0]!r} (choose from {', '.join(subs)})"
        parser, argv = subs[argv[0]], argv[1:]
    known = {s for a in parser._actions for s in a.option_strings}
    for tok in argv:
        if tok == "--":
            break  # what follows goes to another program
        flag = tok.split("=", 1)[0]
        if flag.startswith("--") and flag.rstrip(":,.") not in known:
            return f"no option {flag!r}"
    return None


def command_problems(path: Path, text: str | None = None) -> list[str]:
    """Command lines of a file that the program's parser refuses (whole commands), or whose
    subcommand or flags do not exist (commands shown in part)."""
    problems = []
    for line, argv, strict in command_lines(path, text):
        program, rest = argv[0], argv[1:]
        why = parse_error(program, rest) if strict else flag_error(program, rest)
        if why is not None:
            shown = " ".join([program, *rest])
            problems.append(f"{_rel(path)}:{line}: `{shown}`: {why}")
    return problems


def all_problems(check: Callable[[Path], list[str]], files: list[Path]) -> list[str]:
    """``check`` over ``files``, the problems in one list."""
    return [p for f in files for p in check(f)]
