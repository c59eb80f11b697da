"""The API's own floor, beneath every app that serves an endpoint: the base ViewSet
(``base``), the JSON renderer, the strict parser and the guards at the door (``guards``), the
one error shape and its handler (``errors``), and the blocks serializers are made of
(``serializers``). It knows no session and no run, so ``sessions_app`` and ``runs_app`` both
build on it and neither reaches into the other's API for its foundations."""
