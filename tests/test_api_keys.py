"""Kafka's API keys are defined once, in protocol/api_keys.py: no production module outside
protocol/ binds an API name to a number or compares an ``api_key`` with a literal."""

from __future__ import annotations

import ast
from pathlib import Path

from kio.schema.index import api_key_map

from protocol.api_keys import ApiKey

ROOT = Path(__file__).resolve().parent.parent
PRODUCTION = ("log", "protocol", "raft", "metadata", "broker", "kraft")
# An API's name as a constant: FETCH, and the FETCH_KEY / FETCH_API spellings of it.
API_NAMES = frozenset(
    spelling for name in ApiKey.__members__ for spelling in (name, f"{name}_KEY", f"{name}_API")
)


def _is_int(node: ast.expr) -> bool:
    return isinstance(node, ast.Constant) and type(node.value) is int


def _holds_int(node: ast.expr) -> bool:
    """An int literal, or a tuple, list or set display with one in it (``in (1, 2)``)."""
    if isinstance(node, ast.Tuple | ast.List | ast.Set):
        return any(map(_is_int, node.elts))
    return _is_int(node)


def _mentions_api_key(node: ast.expr) -> bool:
    """``api_key``, ``header.api_key``, ``body.__api_key__``: what holds a request's key."""
    name = node.attr if isinstance(node, ast.Attribute) else getattr(node, "id", "")
    return name in ("api_key", "__api_key__")


def api_key_definitions(source: str) -> list[tuple[int, str]]:
    """(line, what) of every API key number in ``source``: a module-level assignment of an
    int to an API's name, or an ``api_key`` compared with an int literal."""
    found = []
    tree = ast.parse(source)
    for node in tree.body:
        targets: list[ast.expr] = []
        if isinstance(node, ast.Assign) and _is_int(node.value):
            targets = node.targets
        elif isinstance(node, ast.AnnAssign) and node.value is not None and _is_int(node.value):
            targets = [node.target]
        for target in targets:
            if isinstance(target, ast.Name) and target.id in API_NAMES:
                found.append((node.lineno, f"{target.id} = {ast.unparse(node.value)}"))
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare):
            operands = [node.left, *node.comparators]
            if any(map(_mentions_api_key, operands)) and any(map(_holds_int, operands)):
                found.append((node.lineno, ast.unparse(node)))
    return sorted(found)


def api_key_violations(root: Path) -> list[str]:
    """Every API key number defined in a production package outside protocol/."""
    problems = []
    for package in PRODUCTION:
        if package == "protocol":
            continue
        for path in sorted((root / package).rglob("*.py")):
            for line, what in api_key_definitions(path.read_text()):
                problems.append(f"{path.relative_to(root)}:{line}: {what}")
    return problems


def test_no_module_outside_protocol_defines_an_api_key_number() -> None:
    assert api_key_violations(ROOT) == []


def test_scanner_finds_a_constant_and_a_literal_comparison(tmp_path: Path) -> None:
    for package in PRODUCTION:
        (tmp_path / package).mkdir()
    (tmp_path / "broker" / "bad.py").write_text(
        "FETCH = 1\nSYNC_GROUP_KEY: int = 14\nRETRIES = 3\n"
        "def f(header, body):\n"
        "    if header.api_key == 18 or 3 != body.__api_key__:\n"
        "        return api_key in (1, 2)\n"
    )
    (tmp_path / "raft" / "fine.py").write_text(
        "from protocol.api_keys import ApiKey\nFETCH_VERSION = 12\n"
        "def f(api_key):\n    return api_key == ApiKey.FETCH\n"
    )
    (tmp_path / "protocol" / "api_keys.py").write_text("FETCH = 1\n")  # the one place allowed
    assert api_key_violations(tmp_path) == [
        "broker/bad.py:1: FETCH = 1",
        "broker/bad.py:2: SYNC_GROUP_KEY = 14",
        "broker/bad.py:5: 3 != body.__api_key__",
        "broker/bad.py:5: header.api_key == 18",
        "broker/bad.py:6: api_key in (1, 2)",
    ]


def test_the_enum_has_every_key_kafka_assigns_under_its_name() -> None:
    assert {int(key): key.name.lower() for key in ApiKey} == dict(api_key_map)
    assert (ApiKey.PRODUCE, ApiKey.FETCH, ApiKey.API_VERSIONS) == (0, 1, 18)
    assert ApiKey.DESCRIBE_TOPIC_PARTITIONS == 75
