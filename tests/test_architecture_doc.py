"""docs/architecture.md draws the packages and their imports as the code has them: the
diagram is made from the code (``python -m scripts.architecture``) and must be current."""

from __future__ import annotations

from scripts import architecture


def test_the_diagram_is_the_codes() -> None:
    text = architecture.DOC.read_text()
    assert architecture.BEGIN in text and architecture.END in text
    assert architecture.current(text) == text, "run: python -m scripts.architecture"


def test_every_arrow_goes_down_the_layers() -> None:
    rank = {p: i for i, layer in enumerate(architecture.LAYERS) for p in layer}
    wrong = [(a, b) for (a, b) in architecture.edges() if rank[a] >= rank[b]]
    assert wrong == [], "a package imports one of its own layer or above"
    assert architecture.edges(), "the graph is read"
