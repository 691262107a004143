"""The package's layout: data flows one way through the pipeline's stages, so no module imports
from a later stage (docs/architecture.md)."""
import ast
import pathlib

import pytest

XTR = pathlib.Path(__file__).resolve().parent.parent / "xtr"
# text -> tokens -> token vectors -> (loss | index) -> scores -> metrics, then the tools, and the
# console script that starts xtr-search's ScaNN helper before it imports them.
STAGES = ("io", "typecheck", "text", "data", "models", "scoring", "training", "index", "retrieval",
          "evaluation", "analysis", "cli", "search_main")


def _stage(module: str) -> int:
  """The rank of `module` (xtr.<stage>[.…]) in STAGES; the package root `xtr` comes last (its
  `xtr.Searcher` is the public API over everything)."""
  parts = module.split(".")
  return len(STAGES) if len(parts) == 1 else STAGES.index(parts[1])


def _modules() -> dict[str, pathlib.Path]:
  modules = {}
  for path in sorted(XTR.rglob("*.py")):
    parts = path.relative_to(XTR.parent).with_suffix("").parts
    modules[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
  return modules


def _imports(module: str, path: pathlib.Path) -> set[str]:
  """Every xtr module that `module` imports, at the top or inside a function."""
  imported = set()
  for node in ast.walk(ast.parse(path.read_text())):
    if isinstance(node, ast.Import):
      imported |= {alias.name for alias in node.names}
    elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
      imported |= {f"{node.module}.{alias.name}" for alias in node.names}
  return {name for name in imported if name.split(".")[0] == "xtr"}


def test_every_module_belongs_to_a_stage():
  for module in _modules():
    assert _stage(module) >= 0, module


@pytest.mark.parametrize("module", sorted(_modules()))
def test_no_module_imports_a_later_stage(module):
  path = _modules()[module]
  later = sorted(name for name in _imports(module, path) if _stage(name) > _stage(module))
  assert not later, f"{module} imports from a later stage: {later}"


def test_the_check_sees_a_late_import(tmp_path):
  late = tmp_path / "late.py"
  late.write_text("import numpy\nimport xtr.retrieval.ranker\nfrom xtr import io\n"
                  "def f():\n  from xtr.cli import search\n")
  imported = _imports("xtr.models.late", late)
  assert imported == {"xtr.retrieval.ranker", "xtr.io", "xtr.cli.search"}
  assert sorted(
      _stage(name) > _stage("xtr.models.late") for name in imported) == [False, True, True]
