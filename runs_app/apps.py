from django.apps import AppConfig


class RunsAppConfig(AppConfig):
    name = "runs_app"
    verbose_name = "Agent runs"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        # The run host takes the runs this process enqueues in embedded mode from the
        # runtime's local queue (it imports the runtime; the runtime knows nothing of it).
        from .execution.host import host
        from .services import alternatives  # noqa: F401 (with runs: their host calls)

        host.take_local_runs()
