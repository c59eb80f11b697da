"""The phases of a run's loop (``runs_app.engine.AgentLoop`` is made of them)."""
