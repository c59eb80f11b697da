from __future__ import annotations

from .base import Provider, ProviderError


def get_provider(model: str) -> Provider:
    """``scripted`` or ``openai:<model>``."""
    if not model or model == "scripted":
        from .scripted import ScriptedProvider

        return ScriptedProvider()
    if model.startswith("openai:"):
        from .openai_compat import OpenAIProvider

        return OpenAIProvider(model.split(":", 1)[1])
    raise ProviderError(f"Unknown model {model!r}.")


__all__ = ["Provider", "ProviderError", "get_provider"]
