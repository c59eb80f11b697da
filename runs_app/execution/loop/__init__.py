"""The agent loop: ``run.execute`` hands one explicit context (``context.RunContext``) to the
phases — ``start``, ``steps`` (``model``, ``gate``, ``tool_calls``, ``step_end``),
``recovery``, ``end`` — each a module of functions whose calls to another are imports; every
row and event through ``recorder``, the usage through ``usage``."""
