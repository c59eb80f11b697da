"""The deployment's models (``AGENT_MODELS``): what a session may pick, each model's context
window and its price, from which every model call's cost is reckoned.

``AGENT_MODELS`` is JSON, a list of ``{"name", "context_window"?, "price"?}``: ``name`` is what a
session's ``model`` holds (``scripted``, ``openai:<model>``, ``anthropic:<model>``); ``price``
is ``{"input", "output", "cached_input"?}`` in US dollars per million tokens. Unset, the
catalogue is the deployment's ``AGENT_MODEL`` alone (free), and any ``openai:``/``anthropic:``
name is accepted, as before.
"""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass, field
from typing import Any

from django.conf import settings

PREFIXES = ("openai:", "anthropic:")


@dataclass(frozen=True)
class ModelInfo:
    name: str
    context_window: int
    price: dict[str, float] = field(default_factory=dict)

    def data(self) -> dict[str, Any]:
        return {"name": self.name, "context_window": self.context_window, "price": self.price}


def _default_window(name: str) -> int:
    return settings.SCRIPTED_CONTEXT_WINDOW if name == "scripted" else settings.AGENT_CONTEXT_WINDOW


def _valid_name(name: Any) -> bool:
    return isinstance(name, str) and (name == "scripted" or name.startswith(PREFIXES))


@functools.cache
def _parse(raw: str) -> tuple[ModelInfo, ...]:
    try:
        items = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise ValueError(f"AGENT_MODELS is not valid JSON: {exc}") from exc
    if not isinstance(items, list) or not items:
        raise ValueError("AGENT_MODELS must be a non-empty JSON list of models.")
    models = []
    for item in items:
        if not isinstance(item, dict) or not _valid_name(item.get("name")):
            raise ValueError(
                "Each model of AGENT_MODELS needs a name: scripted, openai:<model> or "
                "anthropic:<model>."
            )
        price = item.get("price") or {}
        if not isinstance(price, dict) or not all(
            isinstance(v, int | float) and v >= 0 for v in price.values()
        ):
            raise ValueError(f"The price of {item['name']} must map input/output to numbers.")
        window = item.get("context_window") or _default_window(item["name"])
        models.append(ModelInfo(item["name"], int(window), {k: float(v) for k, v in price.items()}))
    return tuple(models)


def catalogue() -> tuple[ModelInfo, ...]:
    raw = settings.AGENT_MODELS.strip()
    if raw:
        return _parse(raw)
    return (ModelInfo(settings.AGENT_MODEL, _default_window(settings.AGENT_MODEL)),)


def listed() -> bool:
    return bool(settings.AGENT_MODELS.strip())


def find(name: str) -> ModelInfo | None:
    return next((m for m in catalogue() if m.name == name), None)


def check(name: str) -> str | None:
    """None when a session may use ``name``; else the sentence of a 400."""
    if listed():
        if find(name) is None:
            names = ", ".join(m.name for m in catalogue())
            return f"Unknown model {name!r}; this deployment offers: {names}."
        return None
    if not _valid_name(name):
        return "model must be 'scripted', 'openai:<model>' or 'anthropic:<model>'."
    return None


def info(name: str) -> ModelInfo:
    """The catalogue's entry, or a free one with the default window (a model chosen before
    the catalogue changed keeps working)."""
    return find(name) or ModelInfo(name, _default_window(name))


def cost(name: str, usage: dict[str, Any]) -> float:
    """US dollars of one call's ``usage`` (input, output and cached input tokens)."""
    price = info(name).price
    if not price:
        return 0.0
    cached = int(usage.get("cached_input_tokens") or 0)
    fresh = max(0, int(usage.get("input_tokens") or 0) - cached)
    total = (
        fresh * price.get("input", 0.0)
        + cached * price.get("cached_input", price.get("input", 0.0))
        + int(usage.get("output_tokens") or 0) * price.get("output", 0.0)
    )
    return round(total / 1_000_000, 8)


def add_usage(total: dict[str, Any], usage: dict[str, Any]) -> dict[str, Any]:
    """``total`` plus ``usage``: token counts added, ``cost_usd`` too."""
    out = dict(total)
    for key, value in usage.items():
        if key == "estimated":  # a flag of one call's counts, not a count: not summed
            continue
        if key == "cost_usd":
            out[key] = round(float(out.get(key, 0.0)) + float(value or 0.0), 8)
        elif isinstance(value, int | float):
            out[key] = int(out.get(key, 0)) + int(value)
    return out
