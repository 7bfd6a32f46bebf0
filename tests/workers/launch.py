"""Starts ``tether worker`` as the CLI does, with one thing a test may change: the broker's
transport options, from the JSON in ``FLEET_TRANSPORT_OPTIONS`` (e.g. a Redis visibility
timeout of one second, to show that a step far longer than it still runs once)."""

from __future__ import annotations

import json
import os
from typing import Any


def main() -> None:
    extra = os.environ.get("FLEET_TRANSPORT_OPTIONS")
    if extra:
        import tether.workers.app as worker_app

        make = worker_app.create_celery_app

        def configured(*args: Any, **kwargs: Any) -> Any:
            app = make(*args, **kwargs)
            app.conf.broker_transport_options = {**app.conf.broker_transport_options, **json.loads(extra)}
            return app

        worker_app.create_celery_app = configured  # type: ignore[assignment]
    from tether.cli.app import main as cli

    cli()


if __name__ == "__main__":
    main()
