from django.urls import path, re_path

from sessions_app.consumers import SessionConsumer

websocket_urlpatterns = [
    path("ws/sessions/<str:session_id>/", SessionConsumer.as_asgi()),
    # Every other socket path (``/ws/sessions/..%2F<id>/``): accepted and closed with 4403 by
    # the same consumer, instead of the router's "No route found" error (a 500).
    re_path(r"", SessionConsumer.as_asgi()),
]
