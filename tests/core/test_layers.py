"""The layer order of docs/architecture.md: each package imports only the packages below it.

Every import counts: at module level, inside functions (where a circle hides), relative, and
`importlib.import_module("stallscope....")` string literals. Like the test that the engine never imports
the metrics library, this one reads the source, so it holds for code paths no other test runs.
"""

from __future__ import annotations

import ast

from conftest import ROOT

# layer number and source folder of each package; the CLI and the dashboards are the top floor
LAYERS = {
    "stallscope.core": (0, "stallscope/core"),
    "stallscope.engine": (1, "stallscope/engine"),
    "stallscope.refserver": (2, "refserver"),
    "stallscope.collectors": (3, "collectors"),
    "stallscope.analyzers": (4, "analyzers"),
    "stallscope.render": (5, "stallscope/render"),
    "stallscope.rules": (5, "rules"),
    "stallscope.dashboards": (6, "dashboards"),
    "stallscope.cli": (7, "stallscope/cli"),
}
KNOWN: set[tuple[str, str]] = set()


def layer(module: str) -> int:
    """Layer of a module: its longest package prefix; `stallscope` itself (the version) is the ground."""
    owners = [p for p in LAYERS if module == p or module.startswith(p + ".")]
    return LAYERS[max(owners, key=len)][0] if owners else 0


def imports(module: str, source: str, is_package: bool = False):
    """Every stallscope module that `source` (the text of `module`) names in an import, at any depth."""
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            yield from (a.name for a in node.names if a.name.startswith("stallscope"))
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = module.split(".")
                keep = len(parts) - node.level + (1 if is_package else 0)
                pkg = ".".join(parts[:keep])
                base = f"{pkg}.{base}" if base else pkg
            if base.startswith("stallscope"):
                yield base
                yield from (f"{base}.{a.name}" for a in node.names)
        elif isinstance(node, ast.Call) and getattr(node.func, "attr", getattr(node.func, "id", "")) == "import_module" \
                and node.args and isinstance(node.args[0], ast.Constant) and str(node.args[0].value).startswith("stallscope."):
            yield node.args[0].value


def violations(module: str, source: str, is_package: bool = False) -> list[tuple[str, str]]:
    known = [k for m, k in KNOWN if m == module]
    return sorted((module, t) for t in set(imports(module, source, is_package))
                  if layer(t) > layer(module) and not any(t == k or t.startswith(k + ".") for k in known))


def modules():
    """(module name, source text, is package) of every module of every layered package."""
    for package, (_, folder) in LAYERS.items():
        for path in sorted((ROOT / folder).rglob("*.py")):
            rel = path.relative_to(ROOT / folder).with_suffix("")
            parts = [p for p in rel.parts if p != "__init__"]
            yield ".".join([package, *parts]), path.read_text(), path.stem == "__init__"


def test_every_import_points_down():
    found = [v for name, text, pkg in modules() for v in violations(name, text, pkg)]
    assert found == []


def test_the_check_catches_an_import_that_points_up():
    assert violations("stallscope.core.schema", "def f():\n    from stallscope.cli import main\n")
    assert violations("stallscope.engine.scheduler", "from ..render import html\n")
    assert violations("stallscope.collectors.store", "import importlib\nimportlib.import_module('stallscope.analyzers.x')\n")
    assert not violations("stallscope.analyzers.whatif", "from stallscope.engine.scheduler import Scheduler\n")


def test_every_module_belongs_to_a_layer():
    covered = {name for name, _, _ in modules()}
    assert "stallscope.engine.scheduler" in covered and "stallscope.cli.analyze" in covered
    assert len(covered) >= 85


def test_argparse_only_in_the_cli():
    users = sorted(name for name, text, _ in modules()
                   if not name.startswith("stallscope.cli") and ("argparse" in text or "parse_args(" in text))
    assert users == []
