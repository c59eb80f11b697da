import asyncio
import os

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")

from channels.auth import AuthMiddlewareStack  # noqa: E402
from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402
from django.core.asgi import get_asgi_application  # noqa: E402

django_asgi_app = get_asgi_application()

from django.conf import settings  # noqa: E402

from config.routing import websocket_urlpatterns  # noqa: E402
from runs_app.services.recovery import start_sweeper  # noqa: E402
from sessions_app.events import publisher  # noqa: E402
from sessions_app.ws_origin import SameOriginValidator  # noqa: E402

_router = ProtocolTypeRouter(
    {
        "http": django_asgi_app,
        "websocket": SameOriginValidator(AuthMiddlewareStack(URLRouter(websocket_urlpatterns))),
    }
)


async def application(scope, receive, send):  # noqa: ANN001, ANN201
    if settings.EMBEDDED:
        # The in-memory channel layer lives on this loop; runs in threads publish onto it.
        publisher.bind_loop(asyncio.get_running_loop())
        if settings.RUN_EXECUTOR == "thread":
            start_sweeper()  # embedded runs resume here after a restart
    if scope["type"] == "lifespan":
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                await send({"type": "lifespan.shutdown.complete"})
                return
    return await _router(scope, receive, send)
