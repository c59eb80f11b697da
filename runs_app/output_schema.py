"""A run's ``output_schema`` (docs/semantics.md §1.9): checked at the door, and the structured
output validated against it at the run's end, in bounded time.

Both are user input a worker evaluates, so neither may stall it: ``pattern`` and
``patternProperties`` are RE2 expressions, matched in linear time (Python's ``re``, which
``jsonschema`` uses, backtracks: ``^(a+)+$`` against 28 ``a`` and a ``!`` takes seconds, more
takes forever, all holding the interpreter lock); ``uniqueItems`` compares by hashing; a schema
that refers to itself without going into the output (``{"$ref": "#"}``) is refused; the
validation as a whole is bounded in steps, nesting and time, and whatever goes wrong in it is a
sentence for the run's error, never an exception out of the worker.
"""

from __future__ import annotations

import contextvars
import functools
import json
import time
from collections.abc import Iterator
from typing import Any

import jsonschema
import re2
from jsonschema import Draft202012Validator, validators
from jsonschema.exceptions import ValidationError, best_match
from jsonschema_specifications import REGISTRY as SPECIFICATIONS
from referencing import jsonschema as dialects

MAX_SCHEMA_CHARS = 100_000
MAX_SCHEMA_DEPTH = 64
MAX_OUTPUT_CHARS = 1_000_000
MAX_OUTPUT_DEPTH = 100
MAX_STEPS = 500_000  # keyword evaluations; time usually ends them first
MAX_NESTING = 150  # keywords inside one another, well within Python's recursion limit
MAX_SECONDS = 0.5
MAX_MESSAGE = 1000
# Keywords whose values are data, not schemas: a "pattern" in them is no pattern.
DATA = {"enum", "const", "default", "examples"}
# Keywords that apply a schema to the same instance: a loop through them never ends.
IN_PLACE_ONE = ("not", "if", "then", "else")
IN_PLACE_MANY = ("allOf", "anyOf", "oneOf", "extends")
IN_PLACE_MAP = ("dependentSchemas", "dependencies")
REFS = ("$ref", "$dynamicRef", "$recursiveRef")


class InvalidSchema(ValueError):
    """The schema cannot be used; the message is a sentence for the API or the run."""


class _Exhausted(Exception):
    """The validation took more than its share."""


# -- patterns ---------------------------------------------------------------------------------
_OPTIONS = re2.Options()
_OPTIONS.log_errors = False


@functools.lru_cache(maxsize=512)
def _regex(pattern: str) -> Any:
    """``pattern`` as RE2 (Perl-like syntax without backreferences or lookaround), or
    InvalidSchema."""
    try:
        return re2.compile(pattern.encode("utf-8"), _OPTIONS)
    except (re2.error, UnicodeEncodeError) as exc:
        detail = exc.args[0] if exc.args else exc
        if isinstance(detail, bytes):
            detail = detail.decode("utf-8", "replace")
        raise InvalidSchema(
            f"output_schema pattern {pattern[:100]!r} is not a regular expression RE2 accepts "
            f"(no backreferences or lookaround): {detail}."
        ) from exc


def _search(pattern: str, text: str) -> bool:
    return _regex(pattern).search(text.encode("utf-8", "surrogatepass")) is not None


def _pattern(validator: Any, pattern: str, instance: Any, schema: Any) -> Iterator[Any]:
    if validator.is_type(instance, "string") and not _search(pattern, instance):
        yield ValidationError(f"{_short(instance)} does not match {pattern!r}")


def _pattern_properties(validator: Any, patterns: dict, instance: Any, schema: Any) -> Iterator:
    if not validator.is_type(instance, "object"):
        return
    for pattern, subschema in patterns.items():
        for key, value in instance.items():
            if _search(pattern, key):
                yield from validator.descend(value, subschema, path=key, schema_path=pattern)


def _additional_properties(validator: Any, additional: Any, instance: Any, schema: Any) -> Iterator:
    if not validator.is_type(instance, "object"):
        return
    properties = schema.get("properties", {})
    patterns = list(schema.get("patternProperties", {}))
    extras = [
        key
        for key in instance
        if key not in properties and not any(_search(p, key) for p in patterns)
    ]
    if validator.is_type(additional, "object"):
        for extra in extras:
            yield from validator.descend(instance[extra], additional, path=extra)
    elif not additional and extras:
        if patterns:
            verb = "does" if len(extras) == 1 else "do"
            listed = ", ".join(_short(e) for e in sorted(extras)[:20])
            yield ValidationError(f"{listed} {verb} not match any of the regexes: {patterns!r}")
        else:
            listed = ", ".join(_short(e) for e in extras[:20])
            were = "was" if len(extras) == 1 else "were"
            yield ValidationError(
                f"Additional properties are not allowed ({listed} {were} unexpected)"
            )


def _canonical(value: Any) -> Any:
    """A hashable form equal for JSON-equal values (1 and 1.0 alike, true and 1 not)."""
    if isinstance(value, bool) or value is None or isinstance(value, str):
        return (type(value).__name__, value)
    if isinstance(value, (int, float)):
        return ("n", int(value) if isinstance(value, float) and value.is_integer() else value)
    if isinstance(value, list):
        return ("a", tuple(_canonical(v) for v in value))
    if isinstance(value, dict):
        return ("o", frozenset((k, _canonical(v)) for k, v in value.items()))
    return ("?", repr(value))


def _unique_items(validator: Any, unique: Any, instance: Any, schema: Any) -> Iterator[Any]:
    # jsonschema compares objects pairwise: quadratic in the array's length.
    if unique and validator.is_type(instance, "array"):
        seen = set()
        for item in instance:
            key = _canonical(item)
            if key in seen:
                yield ValidationError(f"{_short(instance)} has non-unique elements")
                return
            seen.add(key)


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 200 else text[:200] + "…"


# -- bounds -----------------------------------------------------------------------------------
class _Budget:
    def __init__(self) -> None:
        self.steps = 0
        self.nesting = 0
        self.deadline = time.monotonic() + MAX_SECONDS


_BUDGET: contextvars.ContextVar[_Budget | None] = contextvars.ContextVar(
    "output_schema_budget", default=None
)


def _bounded(keyword: Any) -> Any:
    def bounded(validator: Any, value: Any, instance: Any, schema: Any) -> Iterator[Any]:
        budget = _BUDGET.get()
        if budget is None:
            raise RuntimeError("output_schema validators run inside output_schema.mismatch.")
        budget.steps += 1
        budget.nesting += 1
        try:
            if budget.steps > MAX_STEPS or time.monotonic() > budget.deadline:
                raise _Exhausted("it takes too long")
            if budget.nesting > MAX_NESTING:
                raise _Exhausted("it nests too deeply")
            errors = keyword(validator, value, instance, schema)
            if errors is not None:
                yield from errors
        finally:
            budget.nesting -= 1

    return bounded


OVERRIDES = {
    "pattern": _pattern,
    "patternProperties": _pattern_properties,
    "additionalProperties": _additional_properties,
    "uniqueItems": _unique_items,
}


@functools.cache
def _validator_class(base: type) -> type:
    """``base`` (the schema's draft) with RE2 patterns and every keyword bounded."""
    keywords = {**base.VALIDATORS, **{k: v for k, v in OVERRIDES.items() if k in base.VALIDATORS}}
    bounded = {name: _bounded(fn) for name, fn in keywords.items()}
    return validators.extend(base, bounded)


def _base(schema: dict) -> type:
    return validators.validator_for(schema, default=Draft202012Validator)


# -- the door ---------------------------------------------------------------------------------
def _nodes(value: Any, limit: int) -> Iterator[tuple[Any, str | None]]:
    """Every dict and list in ``value`` with the key it sits under; InvalidSchema past
    ``limit`` levels. Iterative: a deep value would exhaust Python's stack."""
    stack: list[tuple[Any, str | None, int]] = [(value, None, 1)]
    while stack:
        node, key, depth = stack.pop()
        if depth > limit:
            raise InvalidSchema(f"output_schema nests deeper than {limit} levels.")
        yield node, key
        children = node.items() if isinstance(node, dict) else enumerate(node)
        for child_key, child in children:
            if isinstance(child, (dict, list)):
                stack.append((child, child_key if isinstance(node, dict) else key, depth + 1))


def check(schema: Any) -> None:
    """InvalidSchema with a sentence unless ``schema`` can validate outputs in bounded time."""
    if not isinstance(schema, dict):
        raise InvalidSchema("output_schema must be a JSON Schema object.")
    for node, key in _nodes(schema, MAX_SCHEMA_DEPTH):
        if not isinstance(node, dict) or key in DATA:
            continue
        if isinstance(node.get("pattern"), str):
            _regex(node["pattern"])
        if isinstance(node.get("patternProperties"), dict):
            for pattern in node["patternProperties"]:
                _regex(pattern)
    if len(json.dumps(schema)) > MAX_SCHEMA_CHARS:
        raise InvalidSchema(f"output_schema is longer than {MAX_SCHEMA_CHARS} characters.")
    try:
        _base(schema).check_schema(schema, format_checker=None)
    except jsonschema.SchemaError as exc:
        raise InvalidSchema(
            f"output_schema is not a valid JSON Schema: {_cut(exc.message)}"
        ) from exc
    if _loops(schema):
        raise InvalidSchema(
            "output_schema refers to itself without going into the output (a $ref loop), "
            "so no output could ever be checked against it."
        )
    _unevaluated_with_patterns(schema)


def _unevaluated_with_patterns(schema: dict) -> None:
    # jsonschema's unevaluatedProperties matches patternProperties with Python's re, whose
    # time has no bound; the two together are refused rather than matched that way.
    keys = {
        key
        for node, _ in _nodes(schema, MAX_SCHEMA_DEPTH)
        if isinstance(node, dict)
        for key in node
    }
    if "unevaluatedProperties" in keys and "patternProperties" in keys:
        raise InvalidSchema(
            "output_schema may not use unevaluatedProperties together with patternProperties."
        )


def _loops(schema: dict) -> bool:
    """Whether, from any subschema, a chain of keywords that stay on one instance ($ref,
    allOf, not, if…) comes back to where it started: validation would recurse without end."""
    meta = _base(schema).META_SCHEMA
    dialect = (meta.get("$id") or meta.get("id") or "").rstrip("#")
    specification = dialects.specification_with(dialect, default=dialects.DRAFT202012)
    root = SPECIFICATIONS.resolver_with_root(specification.create_resource(schema))
    done: set[int] = set()
    on_path: set[int] = set()
    for start, resolver in _subschemas(schema, root, specification):
        if id(start) in done:
            continue
        on_path.add(id(start))
        stack = [(start, _in_place(start, resolver, specification))]
        while stack:  # depth first, without Python's stack: a schema may be deep
            node, children = stack[-1]
            child, child_resolver = next(children, (None, None))
            if child is None:
                stack.pop()
                on_path.discard(id(node))
                done.add(id(node))
            elif id(child) in on_path:
                return True
            elif id(child) not in done:
                on_path.add(id(child))
                stack.append((child, _in_place(child, child_resolver, specification)))
    return False


def _subschemas(schema: dict, resolver: Any, specification: Any) -> Iterator[tuple[dict, Any]]:
    """Every object in ``schema`` outside data keywords, with the resolver its ``$id``s give."""
    stack: list[tuple[Any, Any]] = [(schema, resolver)]
    while stack:
        node, resolver = stack.pop()
        if isinstance(node, dict):
            resolver = resolver.in_subresource(specification.create_resource(node))
            yield node, resolver
            children = [v for k, v in node.items() if k not in DATA]
        else:
            children = node
        stack.extend((c, resolver) for c in children if isinstance(c, (dict, list)))


def _in_place(node: dict, resolver: Any, specification: Any) -> Iterator[tuple[dict, Any]]:
    """The subschemas applied to the same instance as ``node``, each with its resolver."""
    subs: list[Any] = [node.get(keyword) for keyword in IN_PLACE_ONE]
    for keyword in IN_PLACE_MANY:
        value = node.get(keyword)
        subs.extend(value if isinstance(value, list) else [value])
    for keyword in IN_PLACE_MAP:
        value = node.get(keyword)
        subs.extend(value.values() if isinstance(value, dict) else [])
    for keyword in REFS:
        if isinstance(node.get(keyword), str):
            try:
                resolved = resolver.lookup(node[keyword])
            except Exception:  # noqa: BLE001 — unresolvable: the validation will say so
                continue
            if isinstance(resolved.contents, dict):
                yield resolved.contents, resolved.resolver
    for sub in subs:
        if isinstance(sub, dict):
            yield sub, resolver.in_subresource(specification.create_resource(sub))


# -- the run's end ----------------------------------------------------------------------------
def mismatch(output: Any, schema: Any) -> str | None:
    """None when ``output`` matches ``schema``; else the sentence for the run's error. Never
    raises, and returns within about ``MAX_SECONDS``."""
    token = _BUDGET.set(_Budget())
    try:
        return _mismatch(output, schema)
    except InvalidSchema as exc:
        return f"Invalid output_schema: {exc}"
    except _Exhausted as exc:
        return f"The structured output could not be checked against output_schema: {exc}."
    except RecursionError:
        return (
            "The structured output could not be checked against output_schema: it nests too deeply."
        )
    except Exception as exc:  # noqa: BLE001 — a sentence for the run, never a crashed worker
        return (
            "The structured output could not be checked against output_schema: "
            f"{type(exc).__name__}: {_cut(str(exc))}"
        )
    finally:
        _BUDGET.reset(token)


def _mismatch(output: Any, schema: Any) -> str | None:
    check(schema)
    try:
        for _ in _nodes(output, MAX_OUTPUT_DEPTH) if isinstance(output, (dict, list)) else ():
            pass
    except InvalidSchema:
        return f"The structured output nests deeper than {MAX_OUTPUT_DEPTH} levels."
    if len(json.dumps(output)) > MAX_OUTPUT_CHARS:
        return f"The structured output is longer than {MAX_OUTPUT_CHARS} characters."
    validator = _validator_class(_base(schema))(schema)
    error = best_match(validator.iter_errors(output))
    if error is None:
        return None
    return f"The structured output does not match output_schema: {_cut(error.message)}"


def _cut(text: str) -> str:
    return text if len(text) <= MAX_MESSAGE else text[:MAX_MESSAGE] + "…"
