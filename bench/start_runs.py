"""The streaming benchmark's "API server": starts one run in each of the sessions it is given,
one after the other, in its own process (``python -m bench.start_runs`` with a JSON order on
stdin: ``user_id``, ``session_ids``, ``content``). It sets Django up and says ``ready`` on
stdout before it reads the order, so its start-up is not part of the measured time, and its
CPU seconds from then to the last run started when it is done.

In a deployment the requests that start runs are served by processes other than the
browsers': starting them from a thread of the benchmark's own process made the 500 clients
there wait for the GIL while ``start_run`` ran, which the measured latency then counted.
"""

from __future__ import annotations

import json
import sys
import time

import django


def main() -> None:
    django.setup()
    from django.contrib.auth import get_user_model

    from runs_app.services.runs import start_run
    from sessions_app.models import Session

    print("ready", flush=True)
    cpu = time.process_time()
    order = json.loads(sys.stdin.readline())
    user = get_user_model().objects.get(pk=order["user_id"])
    sessions = Session.objects.in_bulk(order["session_ids"])
    for session_id in order["session_ids"]:
        start_run(
            session=sessions[session_id],
            user=user,
            messages=[{"role": "user", "content": order["content"]}],
        )
    print(f"{time.process_time() - cpu:.4f}", flush=True)


if __name__ == "__main__":
    main()
