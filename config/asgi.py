import asyncio
import os

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")

from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402
from channels.sessions import CookieMiddleware  # noqa: E402
from django.core.asgi import get_asgi_application  # noqa: E402

django_asgi_app = get_asgi_application()

from config.privileges import refuse_root  # noqa: E402
from config.routing import websocket_urlpatterns  # noqa: E402
from core import heap  # noqa: E402
from runs_app.execution import runtime, sweeper  # noqa: E402

refuse_root("web", embedded=runtime.embedded())

from config.body_limit import (  # noqa: E402
    BodyLimit,
    daphne_bounds_bodies,
    daphne_parses_no_forms,
)
from core.request_threads import RequestThreads  # noqa: E402
from realtime.ws_origin import SameOriginValidator  # noqa: E402

# Daphne imports this module before it listens: its requests are changed before the first.
daphne_parses_no_forms()
daphne_bounds_bodies()

from django.urls import get_resolver  # noqa: E402

# The URLconf and every view module it names, imported now rather than by the first request
# (a tenth of a second of it, and objects made after the collector settled).
get_resolver().url_patterns  # noqa: B018 - the property imports them

# HTTP: a request's synchronous parts run on a thread kept from one request to the next, not
# one started for each (core/request_threads.py); as many wait idle as Daphne's loop
# executor has threads.
# Sockets: their cookies only (the consumer resolves their user itself, at connect and at
# every recheck): Channels' session middleware would wrap every frame's send for a session
# save a socket never makes, about a twentieth of the web process's time while runs stream.
_router = ProtocolTypeRouter(
    {
        "http": RequestThreads(
            BodyLimit(django_asgi_app), keep=int(os.environ.get("ASGI_THREADS", "32"))
        ),
        "websocket": SameOriginValidator(CookieMiddleware(URLRouter(websocket_urlpatterns))),
    }
)

# Everything the server needs is imported now: the collector leaves it alone and collects
# less often, so that no collection stops every socket's frames (core/heap.py).
heap.settle()


async def application(scope, receive, send):  # noqa: ANN001, ANN201
    runtime.attach_server(asyncio.get_running_loop(), sweeper.start_sweeper)
    if scope["type"] == "lifespan":
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                await send({"type": "lifespan.shutdown.complete"})
                return
    return await _router(scope, receive, send)
