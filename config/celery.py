import os

from celery import Celery, signals

from config.privileges import refuse_root

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")

app = Celery("agentplat")
app.config_from_object("django.conf:settings", namespace="CELERY")
# The tasks of runs (runs_app/tasks.py) and of a clone (sessions_app/repositories/tasks.py).
app.autodiscover_tasks(["runs_app", "sessions_app.repositories"])


@signals.worker_init.connect
def _refuse_root(**_kwargs) -> None:  # noqa: ANN003
    """A worker never runs as root (config/privileges.py); a worker is services mode."""
    refuse_root("worker", embedded=False)
