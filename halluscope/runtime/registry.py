"""The methods, found rather than listed: every module of ``halluscope.methods`` that defines ``METHOD``
(or ``METHODS``, a dict, for FIBE's variants), then every ``halluscope.methods`` entry point of an
installed package (a module with a ``METHOD``, or a ``Method`` itself). Nothing else names them: the
detector, the command line, Studio's graphs, the evaluators, the tool and the guard, the benches'
method choices and the ensemble all read this registry. Found on first use, once per process.
"""

from __future__ import annotations

import importlib
import pkgutil
import threading
from importlib.metadata import entry_points
from types import ModuleType
from typing import TYPE_CHECKING, Any

from halluscope.checks import key_values
from halluscope.errors import ConfigError, unknown

if TYPE_CHECKING:
    from halluscope.runtime.contract import Method

PACKAGE = "halluscope.methods"  # halluscope's own methods, a module each
ENTRY_POINTS = "halluscope.methods"  # the group a package declares its methods under

_methods: dict[str, Method] = {}  # one dict, filled in place: a reader's reference stays current
_modules: dict[str, ModuleType] = {}
_lock = threading.RLock()
_found = False


def methods() -> dict[str, Method]:
    """Every method by name, in the order found (halluscope's own, then the installed packages')."""
    with _lock:
        if not _found:
            _find()
        return _methods


def modules() -> dict[str, ModuleType]:
    """Each method module by its short name ('selfcheck_prompt'): ``halluscope.selfcheck_prompt``."""
    methods()
    return _modules


def get(method: str) -> Method:
    """The method of a name; 'selfcheck_prompt' and 'SelfCheck-Prompt' are 'selfcheck-prompt'."""
    return methods()[name_of(method)]


def name_of(method: str) -> str:
    """The registered name a user's spelling stands for; an unknown one is an error listing them all."""
    if not isinstance(method, str):
        raise ConfigError(
            f"method takes a method's name, got {type(method).__name__} {method!r}; available: {', '.join(methods())}"
        )
    name = method.strip().lower().replace("_", "-")
    if name not in methods():
        raise ConfigError(unknown("method", method, methods()))
    return name


def configured(name: str) -> tuple[str, dict[str, Any]]:
    """The method and options a configured name stands for ('selfcheck-prompt:prob' is SelfCheck-Prompt
    with its preset 'prob', scoring='prob'; 'grounded[model=nli:DIR]' is grounded with that judge, its own
    options in brackets, KEY=VALUE separated by ';', over its preset's); a plain method name stands for
    itself, with no options."""
    given: dict[str, Any] = {}
    if name.endswith("]") and "[" in name:
        name, _, inline = name[:-1].partition("[")
        given = inline_options(name.partition(":")[0], inline)
    method, sep, preset = name.partition(":")
    if not sep:
        return name_of(method) if given else name, given
    presets = get(method).presets
    if preset not in presets:
        raise ConfigError(f"{method} has no preset {preset!r}; it has: {', '.join(presets) or 'none'}")
    return name_of(method), {**presets[preset], **given}


def own_model(name: str) -> Any:
    """The model a configured name sets itself ('grounded[model=nli:DIR]'), or None."""
    method, own = configured(name)
    return own.get(get(method).model_field)


def inline_options(method: str, inline: str) -> dict[str, Any]:
    """'model=nli:DIR;top_k=1' as options of ``method``, each a name it declares, its value read as
    ``--opt`` reads one (``checks.key_values``: 1 a number, true a boolean, nli:DIR a text)."""
    spec = get(method)
    parts = [p.strip() for p in inline.split(";") if p.strip()]
    for part in parts:
        if part.partition("=")[0].strip() not in spec.option_names:
            raise ConfigError(
                f"{method}[{inline}]: {part!r} is not KEY=VALUE of one of its options ({', '.join(spec.option_names)})"
            )
    found = key_values(parts, f"{method}[...]", typed=True)
    if not found:
        raise ConfigError(f"{method}[]: give its options in the brackets as KEY=VALUE, or leave the brackets out")
    return found


def sentence_methods() -> tuple[str, ...]:
    """The methods that score the sentences of a text (what an ensemble stacks and `bench planted`
    ranks), and their presets by name ('selfcheck-prompt:prob'); an ensemble is not its own member."""
    found = [name for name, m in methods().items() if m.answer_field == "text" and not m.combines]
    return (*found, *(f"{name}:{preset}" for name in found for preset in methods()[name].presets))


def forget() -> None:
    """Find the methods again on next use (a package installed in this process, a test's own method)."""
    global _found
    with _lock:
        _found = False
        _methods.clear()
        _modules.clear()


def _find() -> None:
    global _found
    package = importlib.import_module(PACKAGE)  # by name: the methods sit above the runtime that runs them
    for info in pkgutil.iter_modules(package.__path__):
        if not info.name.startswith("_"):
            _add(importlib.import_module(f"{PACKAGE}.{info.name}"))
    for point in entry_points(group=ENTRY_POINTS):
        loaded = point.load()
        if isinstance(loaded, ModuleType):
            _add(loaded)
        else:
            _register(loaded, point.module)
    _found = True


def _add(module: ModuleType) -> None:
    found = getattr(module, "METHODS", None) or {}
    if getattr(module, "METHOD", None) is not None:
        found = {module.METHOD.name: module.METHOD, **found}
    if found:
        _modules[module.__name__.rsplit(".", 1)[-1]] = module
    for method in found.values():
        _register(method, module.__name__)


def _register(method: Method, where: str) -> None:
    if method.name in _methods:
        raise ConfigError(f"two methods are named {method.name!r} (the second in {where})")
    _methods[method.name] = method
