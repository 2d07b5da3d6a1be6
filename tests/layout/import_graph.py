"""The package's import graph, read from the source (no module is imported), and its layer rules.

Every ``import evolve_envs...`` / ``from evolve_envs... import`` statement counts, at module level
or inside a function (a lazy import is still a dependency); ``from evolve_envs.x import y``
counts as an import of ``evolve_envs.x.y`` when that is a module, else of ``evolve_envs.x``.
A string in the code that is a module's dotted name or an entry point (``"evolve_envs.x.y"``,
``"evolve_envs.x.y:name"``: a ``gym.register`` entry point, a ``python -m`` argument, a lazy
import table) counts as an import of that module too; docstrings do not. The entry points of
``setup.cfg`` are checked against the module that loads their group (:func:`entry_point_links`).
"""

from __future__ import annotations

import ast
import configparser
import re
from collections.abc import Iterable, Mapping
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "evolve_envs"
SETUP_CFG = PACKAGE.parent / "setup.cfg"

#: A module's dotted name, optionally with ``:attribute`` (an entry point).
DOTTED = re.compile(r"evolve_envs(?:\.[A-Za-z_]\w*)+(?::[A-Za-z_][\w.]*)?")

#: Lowest first. A module may import its own layer and the layers below it, never one above.
LAYERS: list[tuple[str, ...]] = [
    ("evolve_envs.reward.protocol",),
    ("evolve_envs.reward", "evolve_envs.envs"),
    ("evolve_envs.progress",),
    ("evolve_envs.recording",),
    # fitting a reward model reads recordings; nothing below it (the backends) imports it
    ("evolve_envs.reward.fitting",),
    ("evolve_envs.wrappers",),
    ("evolve_envs.stack",),
    ("evolve_envs.training",),
    ("evolve_envs.integrations",),
    ("evolve_envs.cli",),
]

#: Pairs that sit side by side and must not know each other: (importer prefix, forbidden prefix).
FORBIDDEN: list[tuple[str, str]] = [
    ("evolve_envs.reward.protocol", "evolve_envs.reward.clients"),
    ("evolve_envs.reward.protocol", "evolve_envs.reward.service"),
    ("evolve_envs.reward", "evolve_envs.envs"),
    ("evolve_envs.envs", "evolve_envs.reward"),
    # the shared training code never names an algorithm; the algorithms do not know each other
    ("evolve_envs.training.algorithm", "evolve_envs.training.distrl"),
    ("evolve_envs.training.algorithm", "evolve_envs.training.grpo"),
    ("evolve_envs.training.loop", "evolve_envs.training.distrl"),
    ("evolve_envs.training.loop", "evolve_envs.training.grpo"),
    ("evolve_envs.training.worker", "evolve_envs.training.distrl"),
    ("evolve_envs.training.worker", "evolve_envs.training.grpo"),
    ("evolve_envs.training.worker_env", "evolve_envs.training.distrl"),
    ("evolve_envs.training.worker_env", "evolve_envs.training.grpo"),
    ("evolve_envs.training.runtime.weight_registry", "evolve_envs.training.distrl"),
    ("evolve_envs.training.runtime.weight_registry", "evolve_envs.training.grpo"),
    ("evolve_envs.training.driver", "evolve_envs.training.distrl"),
    ("evolve_envs.training.driver", "evolve_envs.training.grpo"),
    ("evolve_envs.training.distrl", "evolve_envs.training.grpo"),
    ("evolve_envs.training.grpo", "evolve_envs.training.distrl"),
]


def module_name(path: Path, root: Path = PACKAGE) -> str:
    parts = list(path.relative_to(root.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def modules(root: Path = PACKAGE) -> dict[str, Path]:
    """Every module of the package: dotted name -> file."""
    return {module_name(p, root): p for p in sorted(root.rglob("*.py"))}


def _prose_and_names(tree: ast.AST) -> set[int]:
    """The ids of the strings that are no module reference: the ones that stand as statements
    (docstrings of modules, classes and functions, and under an attribute) and the names given
    to ``logging.getLogger`` (a logger named after a package is no import of it)."""
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant):
            out.add(id(node.value))
        elif isinstance(node, ast.Call):
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
            if name == "getLogger":
                out.update(id(arg) for arg in node.args)
    return out


def named_modules(tree: ast.AST) -> list[str]:
    r"""The dotted names that string constants of the code spell out whole (docstrings and logger
    names aside),
    an entry point's ``:attribute`` cut off.

    >>> named_modules(ast.parse("'evolve_envs.cli'\nx = ['-m', 'evolve_envs.cli.main:f']"))
    ['evolve_envs.cli.main']
    """
    skip = _prose_and_names(tree)
    return [
        node.value.strip().partition(":")[0]
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant)
        and isinstance(node.value, str)
        and id(node) not in skip
        and DOTTED.fullmatch(node.value.strip())
    ]


def imports_of(path: Path, known: Iterable[str]) -> set[str]:
    """The package modules ``path`` imports (anywhere in the file), or names in a string."""
    known = set(known)
    out: set[str] = set()
    tree = ast.parse(path.read_text(), filename=str(path))
    for name in named_modules(tree):
        while name and name not in known:  # a name inside a module: the module
            name = name.rpartition(".")[0]
        if name and name != "evolve_envs":  # an entry point group or logger of the package
            out.add(name)
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [f"{node.module}.{a.name}" for a in node.names] + [node.module]
            names = [n for n in names[:-1] if n in known] or [node.module]
        else:
            continue
        for name in names:
            if not name.startswith("evolve_envs"):
                continue
            while name and name not in known:  # a name inside a module: the module
                name = name.rpartition(".")[0]
            if name:
                out.add(name)
    return out


def graph(root: Path = PACKAGE) -> dict[str, set[str]]:
    mods = modules(root)
    return {name: imports_of(path, mods) - {name} for name, path in mods.items()}


def layer_of(module: str, layers: list[tuple[str, ...]] = LAYERS) -> int | None:
    """The index of the most specific layer prefix that holds ``module`` (None: unlayered)."""
    best: tuple[int, int] | None = None
    for index, prefixes in enumerate(layers):
        for prefix in prefixes:
            if module == prefix or module.startswith(prefix + "."):
                if best is None or len(prefix) > best[1]:
                    best = (index, len(prefix))
    return None if best is None else best[0]


def _under(module: str, prefix: str) -> bool:
    return module == prefix or module.startswith(prefix + ".")


def violations(
    deps: Mapping[str, set[str]],
    layers: list[tuple[str, ...]] = LAYERS,
    forbidden: list[tuple[str, str]] = FORBIDDEN,
) -> list[str]:
    """Every import that runs up a layer or crosses a forbidden pair, as readable lines."""
    bad = []
    for module, targets in sorted(deps.items()):
        mine = layer_of(module, layers)
        for target in sorted(targets):
            theirs = layer_of(target, layers)
            if mine is not None and theirs is not None and theirs > mine:
                bad.append(f"{module} imports {target}, a higher layer")
            for importer, other in forbidden:
                if _under(module, importer) and _under(target, other):
                    bad.append(f"{module} imports {target} ({importer} must not know {other})")
    return bad


def private_imports(root: Path = PACKAGE) -> list[str]:
    """Every ``from evolve_envs.x import _name`` of one module from another, as readable lines: a
    name with a leading underscore is its module's own business."""
    bad = []
    for module, path in modules(root).items():
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            if not isinstance(node, ast.ImportFrom) or node.level or not node.module:
                continue
            if not node.module.startswith("evolve_envs") or node.module == module:
                continue
            for alias in node.names:
                if alias.name.startswith("_") and not alias.name.startswith("__"):
                    bad.append(f"{module} imports {alias.name} from {node.module}, a private name")
    return bad


def entry_points(setup_cfg: Path = SETUP_CFG) -> dict[str, list[str]]:
    """``setup.cfg``'s entry points: group -> the modules they name."""
    parser = configparser.ConfigParser(interpolation=None)
    parser.read(setup_cfg)
    if not parser.has_section("options.entry_points"):
        return {}
    out = {}
    for group, text in parser.items("options.entry_points"):
        lines = [line.split("=", 1)[1] for line in text.splitlines() if "=" in line]
        out[group] = [line.strip().partition(":")[0] for line in lines]
    return out


def entry_point_links(root: Path = PACKAGE, setup_cfg: Path = SETUP_CFG) -> list[tuple[str, str]]:
    """(loader, target) for every entry point of the package: a console script is loaded by the
    programs (``evolve_envs.cli``), a plugin group by the module whose code names the group."""
    mods = modules(root)
    loaders: dict[str, list[str]] = {}
    for module, path in mods.items():
        tree = ast.parse(path.read_text(), filename=str(path))
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                loaders.setdefault(node.value, []).append(module)
    links = []
    for group, targets in entry_points(setup_cfg).items():
        owners = ["evolve_envs.cli"] if group == "console_scripts" else loaders.get(group, [])
        links += [(owner, target) for owner in owners for target in targets]
    return links


def entry_point_violations(
    root: Path = PACKAGE,
    setup_cfg: Path = SETUP_CFG,
    layers: list[tuple[str, ...]] = LAYERS,
) -> list[str]:
    """Every entry point that names a module missing from the package, or one above the layer
    of its loader (a console script outside ``evolve_envs.cli``, a plugin above the module that
    loads its group), as readable lines."""
    known = modules(root)
    bad = []
    for loader, target in sorted(set(entry_point_links(root, setup_cfg))):
        if target.startswith("evolve_envs") and target not in known:
            bad.append(f"entry point {target} of {loader}: no such module")
            continue
        mine, theirs = layer_of(loader, layers), layer_of(target, layers)
        if mine is not None and theirs is not None and theirs > mine:
            bad.append(f"entry point {target} of {loader}, a higher layer")
        if loader == "evolve_envs.cli" and not _under(target, "evolve_envs.cli"):
            bad.append(f"console script {target} is not a program of evolve_envs.cli")
    return bad


def cycles(deps: Mapping[str, set[str]]) -> list[list[str]]:
    """The import circles (strongly connected components of more than one module)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []
    counter = [0]

    def visit(v: str) -> None:  # Tarjan's algorithm
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(deps.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(deps):
        if v not in index:
            visit(v)
    return out
