from __future__ import annotations

from .anthropic_native import AnthropicProvider
from .base import Provider, ProviderError
from .openai_compat import OpenAIProvider
from .scripted import ScriptedProvider


def get_provider(model: str) -> Provider:
    """``scripted``, ``openai:<model>`` or ``anthropic:<model>``."""
    if not model or model == "scripted":
        return ScriptedProvider()
    if model.startswith("openai:"):
        return OpenAIProvider(model.split(":", 1)[1])
    if model.startswith("anthropic:"):
        return AnthropicProvider(model.split(":", 1)[1])
    raise ProviderError(f"Unknown model {model!r}.")


__all__ = ["Provider", "ProviderError", "get_provider"]
