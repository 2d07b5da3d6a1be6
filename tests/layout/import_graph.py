"""The package's import graph, read from the source (no module is imported), and its layer rules.

Every ``import evolve_envs...`` / ``from evolve_envs... import`` statement counts, at module level
or inside a function (a lazy import is still a dependency); ``from evolve_envs.x import y``
counts as an import of ``evolve_envs.x.y`` when that is a module, else of ``evolve_envs.x``.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable, Mapping
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "evolve_envs"

#: Lowest first. A module may import its own layer and the layers below it, never one above.
LAYERS: list[tuple[str, ...]] = [
    ("evolve_envs.reward.protocol",),
    ("evolve_envs.reward", "evolve_envs.envs"),
    ("evolve_envs.progress",),
    ("evolve_envs.recording",),
    ("evolve_envs.wrappers",),
    ("evolve_envs.stack",),
    ("evolve_envs.train",),
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
    ("evolve_envs.train.algorithm", "evolve_envs.train.distrl"),
    ("evolve_envs.train.algorithm", "evolve_envs.train.grpo"),
    ("evolve_envs.train.loop", "evolve_envs.train.distrl"),
    ("evolve_envs.train.loop", "evolve_envs.train.grpo"),
    ("evolve_envs.train.worker", "evolve_envs.train.distrl"),
    ("evolve_envs.train.worker", "evolve_envs.train.grpo"),
    ("evolve_envs.train.worker_env", "evolve_envs.train.distrl"),
    ("evolve_envs.train.worker_env", "evolve_envs.train.grpo"),
    ("evolve_envs.train.weight_registry", "evolve_envs.train.distrl"),
    ("evolve_envs.train.weight_registry", "evolve_envs.train.grpo"),
    ("evolve_envs.train.driver", "evolve_envs.train.distrl"),
    ("evolve_envs.train.driver", "evolve_envs.train.grpo"),
    ("evolve_envs.train.distrl", "evolve_envs.train.grpo"),
    ("evolve_envs.train.grpo", "evolve_envs.train.distrl"),
]


def module_name(path: Path, root: Path = PACKAGE) -> str:
    parts = list(path.relative_to(root.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def modules(root: Path = PACKAGE) -> dict[str, Path]:
    """Every module of the package: dotted name -> file."""
    return {module_name(p, root): p for p in sorted(root.rglob("*.py"))}


def imports_of(path: Path, known: Iterable[str]) -> set[str]:
    """The package modules ``path`` imports (anywhere in the file)."""
    known = set(known)
    out: set[str] = set()
    tree = ast.parse(path.read_text(), filename=str(path))
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
