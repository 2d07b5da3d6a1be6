"""The package's layers hold: no import runs up a layer, no import circle, a small package root."""

from __future__ import annotations

from tests.layout import import_graph as ig


def test_no_import_runs_up_a_layer() -> None:
    assert ig.violations(ig.graph()) == []


def test_no_import_circles() -> None:
    assert ig.cycles(ig.graph()) == []


def test_every_module_has_a_layer() -> None:
    unlayered = [
        m for m in ig.modules() if ig.layer_of(m) is None and m not in {"evolve_envs"}
        and not m.startswith("evolve_envs.configs")
    ]  # fmt: skip
    assert unlayered == []


def test_the_check_catches_an_upward_import(tmp_path) -> None:
    """The layer check fails on an upward import added to a copy of the package."""
    import shutil

    copy = tmp_path / "evolve_envs"
    shutil.copytree(ig.PACKAGE, copy, ignore=shutil.ignore_patterns("__pycache__"))
    assert ig.violations(ig.graph(copy)) == []
    target = copy / "progress" / "done_rules.py"
    late = "\n\ndef _late():\n    from evolve_envs.stack import factory\n"
    target.write_text(target.read_text() + late)
    lines = ig.violations(ig.graph(copy))
    assert lines == [
        "evolve_envs.progress.done_rules imports evolve_envs.stack.factory, a higher layer"
    ]


def test_the_check_catches_an_upward_link_in_a_string(tmp_path) -> None:
    """A module named in a string (an entry point, a ``python -m`` argument) is an import: the
    check fails on an upward one added to a copy of the package; a docstring naming it does not."""
    import shutil

    copy = tmp_path / "evolve_envs"
    shutil.copytree(ig.PACKAGE, copy, ignore=shutil.ignore_patterns("__pycache__"))
    target = copy / "envs" / "synthetic.py"
    prose = '\n\ndef _prose():\n    """evolve_envs.stack.factory:make_env"""\n'
    target.write_text(target.read_text() + prose)
    assert ig.violations(ig.graph(copy)) == []
    planted = '\nENTRY = "evolve_envs.stack.factory:make_registered"\n'
    target.write_text(target.read_text() + planted)
    service = copy / "reward" / "service" / "hosting" / "embedded.py"
    child = '\nCOMMAND = ["python", "-m", "evolve_envs.cli.serve"]\n'
    service.write_text(service.read_text() + child)
    assert ig.violations(ig.graph(copy)) == [
        "evolve_envs.envs.synthetic imports evolve_envs.stack.factory, a higher layer",
        "evolve_envs.reward.service.hosting.embedded imports evolve_envs.cli.serve, a higher layer",
    ]


def test_entry_points_stay_in_their_layer() -> None:
    assert ig.entry_point_violations() == []
    links = ig.entry_point_links()
    assert ("evolve_envs.training.algorithm", "evolve_envs.training.distrl.algorithm") in links
    assert ("evolve_envs.cli", "evolve_envs.reward.service.hosting.serve") not in links


def test_the_check_catches_an_upward_entry_point(tmp_path) -> None:
    """A plugin above the module that loads its group, or a console script outside the
    programs, written into a copy of setup.cfg, fails the check."""
    cfg = tmp_path / "setup.cfg"
    text = ig.SETUP_CFG.read_text()
    backend = "    mock = evolve_envs.reward.service.backends.mock:MockBackend\n"
    script = "    evolve-envs = evolve_envs.cli.main:main\n"
    assert backend in text and script in text
    text = text.replace(backend, backend + "    up = evolve_envs.stack.factory:make_env\n")
    text = text.replace(script, script + "    evolve-train = evolve_envs.training.driver:main\n")
    cfg.write_text(text)
    assert ig.entry_point_violations(setup_cfg=cfg) == [
        "console script evolve_envs.training.driver is not a program of evolve_envs.cli",
        "entry point evolve_envs.stack.factory of evolve_envs.reward.service.backends, "
        "a higher layer",
    ]


def test_no_module_imports_a_private_name() -> None:
    assert ig.private_imports() == []


def test_the_check_catches_a_private_import(tmp_path) -> None:
    import shutil

    copy = tmp_path / "evolve_envs"
    shutil.copytree(ig.PACKAGE, copy, ignore=shutil.ignore_patterns("__pycache__"))
    target = copy / "stack" / "vector.py"
    late = "\n\ndef _late():\n    from evolve_envs.stack.factory import _secret\n"
    target.write_text(target.read_text() + late)
    assert ig.private_imports(copy) == [
        "evolve_envs.stack.vector imports _secret from evolve_envs.stack.factory, a private name"
    ]


def test_the_check_catches_a_circle(tmp_path) -> None:
    deps = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert ig.cycles(deps) == [["a", "b", "c"]]


def test_the_loop_never_names_an_algorithm(tmp_path) -> None:
    import shutil

    copy = tmp_path / "evolve_envs"
    shutil.copytree(ig.PACKAGE, copy, ignore=shutil.ignore_patterns("__pycache__"))
    loop = copy / "training" / "loop.py"
    loop.write_text(loop.read_text() + "\nfrom evolve_envs.training.grpo.algorithm import GRPO\n")
    assert any(
        "must not know evolve_envs.training.grpo" in line for line in ig.violations(ig.graph(copy))
    )


def test_package_root_is_small() -> None:
    root = [p.name for p in ig.PACKAGE.glob("*.py") if p.name != "__init__.py"]
    assert len(root) <= 6, root


def test_reports_import_no_program() -> None:
    """``cli/reports`` renders what the programs hand it; it never imports a program of ``cli/``."""
    reports = "evolve_envs.cli.reports"
    upward = sorted(
        f"{module} imports {dep}"
        for module, deps in ig.graph().items()
        if module == reports or module.startswith(reports + ".")
        for dep in deps
        if dep.startswith("evolve_envs.cli") and not dep.startswith(reports)
    )
    assert upward == []
