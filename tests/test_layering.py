"""The dependency rule: log <- protocol <- raft <- metadata <- broker <- kraft; sim and jepsen
(the test harnesses) on top, never imported."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LAYERS = ("log", "protocol", "raft", "metadata", "broker", "kraft")
HARNESSES = ("sim", "jepsen")
PACKAGES = (*LAYERS, *HARNESSES)


def imported_packages(source: str) -> list[tuple[int, str]]:
    """(line, top-level package) of every absolute import of one of our packages."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module]
        else:
            continue
        for name in names:
            top = name.split(".")[0]
            if top in PACKAGES:
                found.append((node.lineno, top))
    return found


def layering_violations(root: Path) -> list[str]:
    """Every import in a production package of a higher layer or of a harness."""
    problems = []
    for package in LAYERS:
        rank = LAYERS.index(package)
        for path in sorted((root / package).rglob("*.py")):
            for line, top in imported_packages(path.read_text()):
                if top in HARNESSES or LAYERS.index(top) > rank:
                    where = path.relative_to(root)
                    problems.append(f"{where}:{line} ({package}) imports {top}")
    return problems


def test_production_code_follows_the_dependency_rule() -> None:
    assert layering_violations(ROOT) == []


def test_every_layer_is_a_package() -> None:
    for package in PACKAGES:
        assert (ROOT / package / "__init__.py").is_file(), package


def test_checker_reports_an_upward_import_and_a_harness_import(tmp_path: Path) -> None:
    for package in LAYERS:
        (tmp_path / package).mkdir()
    (tmp_path / "log" / "bad.py").write_text("import raft.core\n")
    (tmp_path / "protocol" / "upward.py").write_text("from raft.driver import RaftNode\n")
    (tmp_path / "broker" / "worse.py").write_text("from sim.world import World\n")
    (tmp_path / "kraft" / "fine.py").write_text("from broker import x\nimport log\n")
    (tmp_path / "kraft" / "harnessed.py").write_text("from jepsen.run import run\n")
    assert layering_violations(tmp_path) == [
        "log/bad.py:1 (log) imports raft",
        "protocol/upward.py:1 (protocol) imports raft",
        "broker/worse.py:1 (broker) imports sim",
        "kraft/harnessed.py:1 (kraft) imports jepsen",
    ]
