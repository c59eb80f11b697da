import os

from celery import Celery, signals
from django.conf import settings

from config.privileges import refuse_root
from core.mode import host_queue

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")

app = Celery("agentplat")
app.config_from_object("django.conf:settings", namespace="CELERY")
# The tasks of runs (runs_app/tasks.py), of a clone (sessions_app/repositories/tasks.py) and
# of a history move sent to a session's home host (sessions_app/tasks.py).
app.autodiscover_tasks(["runs_app", "sessions_app.repositories", "sessions_app"])


@signals.worker_init.connect
def _consume_host_queue(sender, **_kwargs) -> None:  # noqa: ANN001, ANN003
    """Every worker consumes its host's queue (``WORKER_HOST``: its sessions' runs and clones,
    sessions_app/hosts.py) beside the default one, whatever its ``-Q`` says (sent once ``-Q``
    is applied, before the consumer starts): the start commands of before keep working."""
    sender.app.amqp.queues.select_add(host_queue(settings.WORKER_HOST))


@signals.worker_init.connect
def _refuse_root(**_kwargs) -> None:  # noqa: ANN003
    """A worker never runs as root (config/privileges.py); a worker is services mode."""
    refuse_root("worker", embedded=False)
