from django.apps import AppConfig


class RunsAppConfig(AppConfig):
    name = "runs_app"
    verbose_name = "Agent runs"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        # The in-process executor calls the engine by way of the runtime, which therefore
        # needs no import of it (the engine imports the runtime).
        from . import engine, runtime

        runtime.set_runner(engine.run_agent)
