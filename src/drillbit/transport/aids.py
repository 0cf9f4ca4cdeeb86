"""Test aids, kept out of the cluster model so that no drill.yaml can set them: a suite that
checks the controller's clock-offset correction and the version handshake sets them in the
environment of the drill it runs."""
from __future__ import annotations

import json
import os

CLOCK_SKEW_ENV = "DRILLBIT_TEST_CLOCK_SKEW"      # JSON {node: seconds}: shift that agent's clock
AGENT_VERSION_ENV = "DRILLBIT_TEST_AGENT_VERSION"  # the agents report this drillbit version


def clock_skew() -> dict[str, float]:
    text = os.environ.get(CLOCK_SKEW_ENV)
    return {str(k): float(v) for k, v in json.loads(text).items()} if text else {}


def agent_version() -> str | None:
    return os.environ.get(AGENT_VERSION_ENV) or None
