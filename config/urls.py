from django.conf import settings
from django.contrib import admin
from django.contrib.staticfiles.views import serve as serve_static
from django.urls import include, path, re_path
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerSplitView

from runs_app import dashboard, usage_page
from runs_app import pages as run_pages
from runs_app.api import alternatives as alternative_views
from runs_app.api import views as run_views
from runs_app.api.branch_usage import SessionUsageViewSet
from runs_app.api.usage import UsageViewSet
from runs_app.health import health
from runs_app.metrics import metrics_view
from sessions_app import disk, pages
from sessions_app.api import account
from sessions_app.api import apply as apply_views
from sessions_app.api import branches as branch_views
from sessions_app.api import repositories as repo_views
from sessions_app.api import views as session_views
from sessions_app.api.blame import BlameViewSet

# ViewSet actions, routed by hand: every path of the contract keeps its exact shape.
sessions = session_views.SessionViewSet.as_view
session_runs = run_views.SessionRunViewSet.as_view
runs = run_views.RunViewSet.as_view
shared = session_views.SharedViewSet.as_view
downloads = session_views.SessionDownloadViewSet.as_view

api = [
    path("health/", health),
    path("auth/token/", account.AuthTokenView.as_view()),
    path("auth/password/", account.PasswordView.as_view()),
    path("models/", session_views.ModelViewSet.as_view({"get": "list"})),
    path("tools/", run_views.ToolViewSet.as_view({"get": "list"})),
    path("usage/", UsageViewSet.as_view({"get": "usage"})),
    path("usage/quota/", UsageViewSet.as_view({"get": "quota"})),
    path("sessions/", sessions({"get": "list", "post": "create"})),
    # Before ``sessions/<session_id>/``, which would take "import" for an id.
    path("sessions/import/", run_views.SessionImportViewSet.as_view({"post": "create"})),
    path("sessions/upload/", repo_views.UploadViewSet.as_view({"post": "create"})),
    path("credentials/", repo_views.CredentialViewSet.as_view({"get": "list", "post": "create"})),
    path(
        "credentials/<str:credential_id>/",
        repo_views.CredentialViewSet.as_view({"delete": "destroy"}),
    ),
    path(
        "sessions/<str:session_id>/",
        sessions({"get": "retrieve", "patch": "partial_update", "delete": "destroy"}),
    ),
    path("sessions/<str:session_id>/messages/", sessions({"get": "messages"})),
    path("sessions/<str:session_id>/head/", sessions({"post": "head"})),
    path("sessions/<str:session_id>/revert/", sessions({"post": "revert"})),
    path("sessions/<str:session_id>/unrevert/", sessions({"post": "unrevert"})),
    path("sessions/<str:session_id>/cleanup/", sessions({"post": "cleanup"})),
    path("sessions/<str:session_id>/diff/", sessions({"get": "diff"})),
    path(
        "sessions/<str:session_id>/compare/",
        branch_views.CompareViewSet.as_view({"get": "compare"}),
    ),
    path("sessions/<str:session_id>/rollback/", sessions({"post": "rollback"})),
    path("sessions/<str:session_id>/fork/", session_runs({"post": "fork"})),
    path(
        "sessions/<str:session_id>/export/",
        run_views.SessionExportViewSet.as_view({"get": "export"}),
    ),
    path("sessions/<str:session_id>/archive/", downloads({"get": "archive"})),
    path("sessions/<str:session_id>/patch/", downloads({"get": "patch"})),
    path("sessions/<str:session_id>/push/", repo_views.PushViewSet.as_view({"post": "push"})),
    path("sessions/<str:session_id>/apply/", apply_views.ApplyViewSet.as_view({"post": "apply"})),
    path(
        "sessions/<str:session_id>/alternatives/",
        alternative_views.AlternativesViewSet.as_view({"post": "alternatives"}),
    ),
    path(
        "sessions/<str:session_id>/adopt/",
        alternative_views.AlternativesViewSet.as_view({"post": "adopt"}),
    ),
    path(
        "sessions/<str:session_id>/share/",
        sessions({"get": "shared_link", "post": "share", "delete": "unshare"}),
    ),
    path("shared/<str:token>/", shared({"get": "retrieve"})),
    path("shared/<str:token>/fork/", run_views.SharedForkViewSet.as_view({"post": "fork"})),
    path("shared/<str:token>/files/<path:path>", shared({"get": "files"})),
    path("sessions/<str:session_id>/tree/", sessions({"get": "tree"})),
    path("sessions/<str:session_id>/lineage/", sessions({"get": "lineage"})),
    path("sessions/<str:session_id>/usage/", SessionUsageViewSet.as_view({"get": "usage"})),
    path("sessions/<str:session_id>/checkpoints/", session_runs({"get": "checkpoints"})),
    path("sessions/<str:session_id>/files/", sessions({"get": "files"})),
    path("sessions/<str:session_id>/files/<path:path>", sessions({"get": "file"})),
    path(
        "sessions/<str:session_id>/blame/<path:path>",
        BlameViewSet.as_view({"get": "blame"}),
    ),
    path("sessions/<str:session_id>/runs/", session_runs({"get": "list", "post": "create"})),
    path("sessions/<str:session_id>/runs/stream/", session_runs({"post": "stream"})),
    path("sessions/<str:session_id>/abort/", session_runs({"post": "abort"})),
    path("sessions/<str:session_id>/compact/", session_runs({"post": "compact"})),
    path("parts/<str:part_id>/", session_views.PartViewSet.as_view({"get": "retrieve"})),
    path("runs/<str:run_id>/", runs({"get": "retrieve"})),
    path("runs/<str:run_id>/messages/", runs({"get": "transcript"})),
    path("runs/<str:run_id>/cancel/", runs({"post": "cancel"})),
    path("runs/<str:run_id>/approve/", runs({"post": "approve"})),
    path("runs/<str:run_id>/continue/", runs({"post": "continue_run"})),
    path("runs/<str:run_id>/regenerate/", runs({"post": "regenerate"})),
    path("schema/", SpectacularAPIView.as_view(), name="schema"),
    path(
        "docs/",
        SpectacularSwaggerSplitView.as_view(url_name="schema", template_name="app/swagger_ui.html"),
        name="api-docs",
    ),
]

urlpatterns = [
    path("api/", include(api)),
    # Before the admin's own URLs; staff only (admin_view), scoped like the session list.
    path("admin/usage/", admin.site.admin_view(dashboard.usage_dashboard), name="admin-usage"),
    path(
        "admin/usage/export.csv", admin.site.admin_view(dashboard.usage_csv), name="admin-usage-csv"
    ),
    path("admin/disk/", admin.site.admin_view(disk.disk_page), name="admin-disk"),
    path("admin/", admin.site.urls),
    path("metrics", metrics_view),  # Prometheus: METRICS_TOKEN (runs_app/metrics.py)
    path("", include(pages.urlpatterns)),
    path("", include(run_pages.urlpatterns)),
    path("usage/", usage_page.usage_page, name="usage"),  # the user's own (issue 46)
    re_path(
        r"^" + settings.STATIC_URL.lstrip("/") + r"(?P<path>.*)$",
        serve_static,
        {"insecure": True},
    ),
]

handler400 = "api.errors.json_400"
handler404 = "api.errors.json_404"
handler500 = "api.errors.json_500"
