from django.apps import AppConfig


class RunsAppConfig(AppConfig):
    name = "runs_app"
    verbose_name = "Agent runs"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        # In-process runs go to the run host by way of the runtime, which therefore needs no
        # import of it (the host imports the runtime).
        from sessions_app.services import repo_import

        from . import host, runtime

        runtime.set_runner(host.host.submit)
        repo_import.set_dispatcher(runtime.enqueue_prepare)
