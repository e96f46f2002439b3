"""The package's layers point one way (pyproject.toml, [tool.importlinter]): cli and
commands -> lab -> rl -> control -> workloads -> jsonfiles -> middleware -> devices -> errors
-> stop_signals -> _core.
Checked with import-linter's `lint-imports` when it is installed, and always by a direct
reading of every module's imports (so a violation fails here even without it); neither a
module-level nor a function-level import may reach up. Imports sit at the top of their
module, except those of the modules in LAZY: they pull in Gymnasium or scikit-learn (a
second or more), so the commands that need them import them in the function that runs, and
the store and service commands start without them."""
import ast
import pathlib
import sys

import pytest

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

ROOT = pathlib.Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "python" / "nvmw"


#: Modules that may be imported inside a function (still only from a higher layer), and why.
LAZY = {
    "nvmw.rl.agent": "scikit-learn: only to learn, or when no current greedy policy file exists",
    "nvmw.rl.registry": "Gymnasium: the RL environments of the RL commands' options",
    "nvmw.rl.episodes": "scikit-learn: the episode runners of collect and train",
    "nvmw.lab.phase_run": "Gymnasium: run-phase drives a RealEnv, its --help does not",
}


def _contract() -> list[str]:
    with open(ROOT / "pyproject.toml", "rb") as fh:
        config = tomllib.load(fh)["tool"]["importlinter"]
    (contract,) = [c for c in config["contracts"] if c["type"] == "layers"]
    return [layer.strip("()") for layer in contract["layers"]]


def _module_name(path: pathlib.Path, package: pathlib.Path = PACKAGE) -> str:
    parts = list(path.relative_to(package.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _imports(path: pathlib.Path):
    """(imported module, line, inside a function) for every nvmw import in a file."""
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    in_function = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            in_function.update(id(n) for n in ast.walk(node) if n is not node)
    for node in ast.walk(tree):
        names = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            # "from nvmw import _core" imports the submodule nvmw._core.
            names = [f"{node.module}.{a.name}" for a in node.names] + [node.module]
        for name in names:
            if name == "nvmw" or name.startswith("nvmw."):
                yield name, node.lineno, id(node) in in_function


def _layer_of(module: str, layers: list[str]):
    for rank, layer in enumerate(layers):
        if module == layer or module.startswith(layer + "."):
            return rank
    return None


def violations(package: pathlib.Path = PACKAGE) -> list[str]:
    layers = _contract()
    found = []
    for path in sorted(package.rglob("*.py")):
        importer = _module_name(path, package)
        mine = _layer_of(importer, layers)
        for imported, line, local in _imports(path):
            theirs = _layer_of(imported, layers)
            where = f"{path.relative_to(package.parent)}:{line}"
            if mine is not None and theirs is not None and theirs < mine:
                found.append(f"{where}: {importer} ({layers[mine]}) imports {imported} ({layers[theirs]}), "
                             "a higher layer")
            if local and imported != "nvmw" and not any(imported == m or imported.startswith(m + ".")
                                                         for m in LAZY):
                found.append(f"{where}: {importer} imports {imported} inside a function")
    return found


def test_every_module_belongs_to_a_layer():
    layers = _contract()
    modules = [_module_name(p) for p in PACKAGE.rglob("*.py")]
    assert [m for m in modules if m != "nvmw" and _layer_of(m, layers) is None] == []


def test_no_import_reaches_up_a_layer():
    assert violations() == []


def test_the_check_catches_an_upward_import(tmp_path):
    # A controller that imported the lab would break the layering: the checker says so.
    bad = tmp_path / "nvmw" / "control"
    bad.mkdir(parents=True)
    (bad / "__init__.py").write_text("")
    (bad / "bad.py").write_text("from nvmw.lab.evaluation import summarize\n\ndef f():\n    import nvmw.rl\n")
    found = violations(tmp_path / "nvmw")
    assert any("imports nvmw.lab.evaluation" in v and "a higher layer" in v for v in found)
    assert any("imports nvmw.rl inside a function" in v for v in found)


def test_only_the_heavy_modules_may_be_imported_inside_a_function(tmp_path):
    lab = tmp_path / "nvmw" / "lab"
    lab.mkdir(parents=True)
    (lab / "__init__.py").write_text("")
    (lab / "mod.py").write_text("def f():\n    from nvmw.rl.agent import QLearningAgent\n"
                                "    from nvmw.control.sla import SLASpec\n")
    rl = tmp_path / "nvmw" / "rl"
    rl.mkdir()
    (rl / "__init__.py").write_text("")
    (rl / "up.py").write_text("def f():\n    from nvmw.lab.phase_run import run_phase\n")
    found = violations(tmp_path / "nvmw")
    assert [v.split(": ", 1)[1] for v in found] == [
        "nvmw.lab.mod imports nvmw.control.sla.SLASpec inside a function",
        "nvmw.lab.mod imports nvmw.control.sla inside a function",
        "nvmw.rl.up (nvmw.rl) imports nvmw.lab.phase_run.run_phase (nvmw.lab), a higher layer",
        "nvmw.rl.up (nvmw.rl) imports nvmw.lab.phase_run (nvmw.lab), a higher layer",
    ]


def test_lint_imports_keeps_the_contract():
    cli = pytest.importorskip("importlinter.cli")
    assert cli.lint_imports(config_filename=str(ROOT / "pyproject.toml"), no_cache=True) == 0
