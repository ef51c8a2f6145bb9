"""The house kept in order (docs/architecture.md): its rooms in layers that import only downwards, no
import cycle, and functions that read on one screen (a graph's build is its wiring, each node a function
of its own)."""

from __future__ import annotations

import ast
import re
from collections.abc import Callable
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "halluscope"
LONGEST = 60  # lines, docstring included
LONGER = {  # the named exceptions (at most two), each with why it stands as one function for now
    "halluscope/scale.py ray_map": "the actor pool's life cycle (start, feed, collect, replace a lost actor, "
    "stop) as one loop over one set of futures",
}
# the rooms of halluscope/, lowest first: a room imports from its own layer and those below it
LAYERS = (
    ("errors", "version"),
    ("checks", "text", "readers", "labelled", "hub", "metrics", "scoring", "prompts", "results"),
    ("backends", "calibration", "probing"),
    ("runtime",),
    ("methods", "scale"),
    ("detectors", "tool_calls"),
    ("tools", "evaluators", "bench", "demo", "check_answer", "streaming", "testing", "serve"),
    ("tune",),
    ("cli", "halluscope"),
)


def _imports(path: Path, package: str, modules: set[str]) -> set[str]:
    """Every halluscope module ``path`` imports, at its top or inside a function: ``from X import y``
    imports the module X.y where there is one, else X itself (the package root's names included)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names if a.name.startswith("halluscope")}
        elif isinstance(node, ast.ImportFrom) and node.module:
            module = node.module if node.level == 0 else f"{package}.{node.module}"
            if module.startswith("halluscope"):
                named = {f"{module}.{a.name}" for a in node.names}
                found |= named & modules
                if named - modules:
                    found.add(module)
    return found


def _graph() -> dict[str, set[str]]:
    """Each module of the package and the modules of the package it imports."""
    files = {
        ".".join(p.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__"): p for p in PACKAGE.rglob("*.py")
    }
    graph = {}
    for name, path in files.items():
        package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
        graph[name] = {m for m in _imports(path, package, set(files)) if m in files and m != name}
    return graph


def _room(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else parts[0]


def test_every_room_imports_only_from_its_layer_and_below() -> None:
    layer = {room: depth for depth, rooms in enumerate(LAYERS) for room in rooms}
    graph = _graph()
    unplaced = sorted({_room(m) for m in graph} - set(layer))
    assert not unplaced, f"rooms in no layer of LAYERS (and of docs/architecture.md): {unplaced}"
    upward = sorted(
        f"{module} -> {imported}"
        for module, imported_all in graph.items()
        for imported in imported_all
        if layer[_room(imported)] > layer[_room(module)]
    )
    assert not upward, upward


def test_no_import_cycle_not_even_inside_functions() -> None:
    """A cycle, hidden in a function or not, is a failure naming it."""
    graph = _graph()
    seen: dict[str, int] = {}

    def visit(node: str, trail: list[str]) -> None:
        seen[node] = 1
        for nxt in graph[node]:
            if seen.get(nxt) == 1:
                cycle = trail[trail.index(nxt) :] + [nxt] if nxt in trail else [node, nxt]
                pytest.fail("import cycle: " + " -> ".join(cycle))
            if nxt not in seen:
                visit(nxt, [*trail, nxt])
        seen[node] = 2

    for name in graph:
        if name not in seen:
            visit(name, [name])


def test_no_function_of_the_package_is_longer_than_60_lines_but_two_named() -> None:
    assert len(LONGER) <= 2
    long, named = [], set()
    for path in sorted(PACKAGE.rglob("*.py")):
        for found in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(found, ast.FunctionDef | ast.AsyncFunctionDef):
                lines = (found.end_lineno or found.lineno) - found.lineno + 1
                name = f"{path.relative_to(ROOT).as_posix()} {found.name}"
                if lines > LONGEST and name in LONGER and lines <= 80:
                    named.add(name)
                elif lines > LONGEST:
                    long.append(f"{path.relative_to(ROOT)}:{found.lineno} {found.name} ({lines} lines)")
    assert not long, long
    assert named == set(LONGER), f"exceptions no longer needed: {sorted(set(LONGER) - named)}"


def test_a_runs_settings_travel_as_arguments_not_context_variables() -> None:
    """A run's call budget goes from the door to the gateway as one object passed down (on the run's
    CallStats), never through a ContextVar: a budget set in a context variable once held on one thread
    and was lost on the next."""
    found = [
        f"{path.relative_to(ROOT)}:{number}"
        for path in sorted(PACKAGE.rglob("*.py"))
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if "ContextVar" in line
    ]
    assert not found, found


# the long runs below the command line, and the one parameter of each that holds what the run is
TYPED_RUNS = {
    "halluscope.tune.calibrate:calibrate_wikibio": "settings",
    "halluscope.tune.choose:choose": "settings",
    "halluscope.tune.probe_fit:fit": "settings",
    "halluscope.bench.papers.icl:phr_plan": "settings",
}
RUNTIME = {"data", "out", "model", "gateway", "progress", "answerer", "judge", "stats"}  # with what, not what


@pytest.mark.parametrize("where", sorted(TYPED_RUNS))
def test_a_long_run_takes_its_settings_as_one_checked_dataclass(where: str) -> None:
    """What a run is (methods, splits, folds, targets, budgets) travels as one frozen dataclass that
    checks itself when made; the other parameters say only what it runs with (data, model, gateway)."""
    import dataclasses
    import importlib
    import inspect
    import typing

    module, name = where.split(":")
    run = getattr(importlib.import_module(module), name)
    hints = typing.get_type_hints(run)
    settings = hints[TYPED_RUNS[where]]
    assert dataclasses.is_dataclass(settings) and settings.__dataclass_params__.frozen, where
    assert callable(getattr(settings, "__post_init__", None)), f"{settings.__name__} checks nothing when made"
    others = set(inspect.signature(run).parameters) - {TYPED_RUNS[where]}
    assert others <= RUNTIME, f"{where} takes settings one by one: {sorted(others - RUNTIME)}"


def test_argparse_lives_in_the_cli_alone() -> None:
    """The benches and tune/ declare their settings (dataclasses of ``arg`` fields); only cli/ turns a
    declaration into flags, so a benchmark runs from Python with no parser in sight."""
    found = [
        str(path.relative_to(ROOT))
        for path in sorted(PACKAGE.rglob("*.py"))
        if path.relative_to(PACKAGE).parts[0] != "cli"
        for node in ast.walk(ast.parse(path.read_text()))
        if (isinstance(node, ast.Import) and any(a.name == "argparse" for a in node.names))
        or (isinstance(node, ast.ImportFrom) and node.module == "argparse")
    ]
    assert not found, found


def _documented_edges() -> set[tuple[str, str]]:
    """The same-layer edges docs/architecture.md allows: its table after the '<!-- same-layer edges -->' mark."""
    text = (ROOT / "docs" / "architecture.md").read_text()
    table = text.split("<!-- same-layer edges -->", 1)[1].split("\n\n", 1)[0]
    edges = set()
    for row in (line for line in table.splitlines() if line.startswith("| ") and line[2].isdigit()):
        for part in row.split("|")[2].split(";"):
            importer, _, imported = part.partition("->")
            edges |= {(importer.strip(" `"), name.strip(" `")) for name in imported.split(",")}
    return edges


def test_the_same_layer_edges_are_the_ones_the_architecture_page_names() -> None:
    layer = {room: depth for depth, rooms in enumerate(LAYERS) for room in rooms}
    found = {
        (_room(module), _room(imported))
        for module, imports in _graph().items()
        for imported in imports
        if _room(module) != _room(imported) and layer[_room(module)] == layer[_room(imported)]
    }
    assert found == _documented_edges()


def test_the_architecture_page_names_every_module() -> None:
    text = (ROOT / "docs" / "architecture.md").read_text()
    unnamed = [
        str(p.relative_to(PACKAGE))
        for p in sorted(PACKAGE.rglob("*.py"))
        if p.name not in ("__init__.py", "__main__.py")
        and p.parent.name != "methods"  # one file per method: named by the registry, and in docs/methods.md
        and p.parent.name != "papers"  # one paper's protocol a module: named in the papers' list
        and p.stem not in text
    ]
    assert not unnamed, f"docs/architecture.md names none of {unnamed}"


def test_the_gateway_sends_calls_and_its_readings_and_fan_out_live_apart() -> None:
    lines = len((PACKAGE / "backends" / "gateway.py").read_text().splitlines())
    assert lines < 450, f"backends/gateway.py has {lines} lines: readings and fan-out belong in their own modules"
    gateway = ast.parse((PACKAGE / "backends" / "gateway.py").read_text())
    methods = {f.name for c in gateway.body if isinstance(c, ast.ClassDef) for f in c.body if hasattr(f, "name")}
    assert not methods & {"token_stats", "hidden_states", "forward", "complete", "_sample_together"}, methods


def _hits_outside(room: str, scan: Callable[[Path], list[str]]) -> list[str]:
    """What ``scan`` finds in every module of the package outside ``room``."""
    return [
        hit
        for path in sorted(PACKAGE.rglob("*.py"))
        if room not in path.relative_to(PACKAGE).parts
        for hit in scan(path)
    ]


SPEC_PREFIXES = ("nli:", "local:")
DECLARING = {"option", "Flag", "arg", "add_argument"}  # an option's default or help may show a spec


def _spec_literals(path: Path) -> list[str]:
    """String literals (plain or f-strings) of ``path`` that begin with a provider prefix, outside docstrings
    and option declarations: a spec written by hand rather than by its provider's function."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    skip: set[int] = set()
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if (
            isinstance(body, list)
            and body
            and isinstance(body[0], ast.Expr)
            and isinstance(body[0].value, ast.Constant)
        ):
            skip.add(id(body[0].value))
        if isinstance(node, ast.Call):
            name = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
            if name in DECLARING or name in {"model", "judge", "samples"}:  # runtime.options' declarations too
                skip |= {id(n) for n in ast.walk(node)}
    found = []
    for node in ast.walk(tree):
        if id(node) in skip:
            continue
        text = None
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            text = node.value
        elif isinstance(node, ast.JoinedStr) and node.values and isinstance(node.values[0], ast.Constant):
            text = str(node.values[0].value)
            skip |= {id(v) for v in node.values}
        if text is not None and text.startswith(SPEC_PREFIXES):
            found.append(f"{path.relative_to(ROOT)}:{node.lineno} {text[:40]!r}")
    return found


def test_no_spec_prefix_is_written_outside_the_backends() -> None:
    """A judge or model spec is built by its provider's function (``local_spec``, ``nli_spec``,
    ``default_spec``) and read by ``judge_target``; outside backends/ only docstrings and option
    declarations write one."""
    found = _hits_outside("backends", _spec_literals)
    assert not found, found


# the modules outside methods/ that read one method's own internals, each with why (at most these)
READS_A_METHOD = {
    ("halluscope.bench.papers.clue", "halluscope.methods.clue"): "the CLUE paper's protocol: its merge "
    "threshold and zero-shot prompt, as the paper's ablations vary them",
    ("halluscope.bench.papers.truthfulqa", "halluscope.methods.fewl"): "the FEWL paper's protocol: its "
    "reference answers and multiple-choice scoring, drawn as the method draws them",
    ("halluscope.tune.probe_fit", "halluscope.methods.probe"): "the probe's fit reads the features the "
    "probe itself reads at check time",
}


def test_a_method_is_reached_through_the_registry() -> None:
    """Outside methods/, a method is what ``registry.get`` returns; what methods and benches share (the
    short-answer prompt, semantic entropy's estimates) sits below them, in prompts/ or scoring/."""
    found = {
        (module, imported)
        for module, imports in _graph().items()
        if _room(module) != "methods"
        for imported in imports
        if imported.startswith("halluscope.methods.")
    }
    assert found <= set(READS_A_METHOD), sorted(found - set(READS_A_METHOD))


FLAG = re.compile(r"(?<![\w-])--[a-z][a-z0-9-]*")


def _flags_in_raised_messages(path: Path) -> list[str]:
    """Each ``--flag`` in the text of an exception ``path`` raises, outside backquoted commands (a
    command to run, such as `halluscope models pull NAME --force`, is spelled as typed)."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if not isinstance(node, ast.Raise) or node.exc is None:
            continue
        inside = set()  # an f-string's pieces, read as the one text they make
        for part in ast.walk(node.exc):
            text = None
            if isinstance(part, ast.JoinedStr):
                inside |= {id(v) for v in part.values}
                text = "".join(v.value if isinstance(v, ast.Constant) else "{}" for v in part.values)
            elif isinstance(part, ast.Constant) and isinstance(part.value, str) and id(part) not in inside:
                text = part.value
            for flag in FLAG.findall(re.sub(r"`[^`]*`", "", text or "")):
                found.append(f"{path.relative_to(ROOT)}:{part.lineno} {flag}")
    return found


def test_no_error_below_the_cli_names_a_flag() -> None:
    """A library caller never typed --folds: an error below cli/ names the keyword ('folds', 'force=True')
    in its ``settings``, and the command line shows it as the flag (cli/flags.as_flags)."""
    found = _hits_outside("cli", _flags_in_raised_messages)
    assert not found, found
