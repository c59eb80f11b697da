from django.apps import AppConfig


class RunsAppConfig(AppConfig):
    name = "runs_app"
    verbose_name = "Agent runs"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        # The run host takes the runs this process enqueues in embedded mode from the
        # runtime's local queue (it imports the runtime; the runtime knows nothing of it).
        from sessions_app.services import repo_import

        from .execution import host, runtime

        host.host.take_local_runs()
        repo_import.set_dispatcher(runtime.enqueue_prepare)
