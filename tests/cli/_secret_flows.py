"""A workflow whose steps log secrets and fail with a database URL's password in the
exception text (``tests/cli/test_secret_sinks.py`` searches every sink for them)."""

from __future__ import annotations

import logging
import os

from tether.runtime import Step, Workflow

logger = logging.getLogger("tether.tests.secret_flow")


def leaky_plan() -> Workflow:
    def connect(sc):
        token, password = os.environ["TETHER_TEST_SERVICE_TOKEN"], os.environ["TETHER_TEST_DB_PASSWORD"]
        logger.debug("using token %s", token)
        logger.info("connecting with %r", {"dsn": f"postgresql://app:{password}@db.internal/app"})
        try:
            raise ConnectionRefusedError(f"cannot reach postgresql://app:{password}@db.internal/app")
        except ConnectionRefusedError:
            logger.exception("connect failed (token=%s)", token)
        return {"connect_output": "ok"}

    def migrate(sc):
        password = os.environ["TETHER_TEST_DB_PASSWORD"]
        raise RuntimeError(
            f"migration failed on postgresql://app:{password}@db.internal/app: relation missing"
        )

    return Workflow.plan([Step(id="connect", fn=connect), Step(id="migrate", fn=migrate)], name="leaky")
