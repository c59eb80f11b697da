from django.conf import settings
from django.contrib import admin
from django.contrib.staticfiles.views import serve as serve_static
from django.urls import include, path, re_path
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerSplitView

from runs_app.api import views as run_views
from runs_app.health import health
from sessions_app import pages
from sessions_app.api import views as session_views

api = [
    path("health/", health),
    path("auth/token/", session_views.auth_token),
    path("sessions/", session_views.sessions),
    path("sessions/<str:session_id>/", session_views.session_detail),
    path("sessions/<str:session_id>/messages/", session_views.session_messages),
    path("sessions/<str:session_id>/head/", session_views.session_head),
    path("sessions/<str:session_id>/revert/", session_views.session_revert),
    path("sessions/<str:session_id>/unrevert/", session_views.session_unrevert),
    path("sessions/<str:session_id>/cleanup/", session_views.session_cleanup),
    path("sessions/<str:session_id>/diff/", session_views.session_diff),
    path("sessions/<str:session_id>/rollback/", session_views.session_rollback),
    path("sessions/<str:session_id>/fork/", session_views.session_fork),
    path("sessions/<str:session_id>/share/", session_views.session_share),
    path("shared/<str:token>/", session_views.shared_detail),
    path("shared/<str:token>/fork/", session_views.shared_fork),
    path("shared/<str:token>/files/<path:path>", session_views.shared_files),
    path("sessions/<str:session_id>/tree/", session_views.session_tree),
    path("sessions/<str:session_id>/lineage/", session_views.session_lineage),
    path("sessions/<str:session_id>/checkpoints/", run_views.session_checkpoints),
    path("sessions/<str:session_id>/files/", session_views.session_files),
    path("sessions/<str:session_id>/files/<path:path>", session_views.session_files),
    path("sessions/<str:session_id>/runs/", run_views.session_runs),
    path("sessions/<str:session_id>/runs/stream/", run_views.session_runs_stream),
    path("sessions/<str:session_id>/abort/", run_views.session_abort),
    path("parts/<str:part_id>/", session_views.part_detail),
    path("runs/<str:run_id>/", run_views.run_detail),
    path("runs/<str:run_id>/messages/", run_views.run_messages),
    path("runs/<str:run_id>/cancel/", run_views.run_cancel),
    path("runs/<str:run_id>/continue/", run_views.run_continue),
    path("runs/<str:run_id>/regenerate/", run_views.run_regenerate),
    path("schema/", SpectacularAPIView.as_view(), name="schema"),
    path(
        "docs/",
        SpectacularSwaggerSplitView.as_view(url_name="schema", template_name="app/swagger_ui.html"),
        name="api-docs",
    ),
]

urlpatterns = [
    path("api/", include(api)),
    path("admin/", admin.site.urls),
    path("", include(pages.urlpatterns)),
    re_path(
        r"^" + settings.STATIC_URL.lstrip("/") + r"(?P<path>.*)$",
        serve_static,
        {"insecure": True},
    ),
]

handler400 = "sessions_app.api.errors.json_400"
handler404 = "sessions_app.api.errors.json_404"
handler500 = "sessions_app.api.errors.json_500"
