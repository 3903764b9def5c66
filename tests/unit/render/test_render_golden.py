"""Golden files pin every builder's output for three receivers (complete, minimal, scheduled).

Regenerate after an intended change with `KCT_UPDATE_GOLDEN=1 pytest tests/unit/render`, then read the
diff of tests/unit/render/golden/ before committing it.
"""

from __future__ import annotations

import datetime as dt
import os
from pathlib import Path
from typing import Any

import pytest
import yaml

from kct.api.telemetry_receiver import parse_receiver_spec
from kct.render import BUILDERS, ReceiverParams
from kct.render.certificates import KeyPair, TlsMaterial

REPO = Path(__file__).resolve().parents[3]
GOLDEN = Path(__file__).parent / "golden"
UPDATE = os.environ.get("KCT_UPDATE_GOLDEN") == "1"
UID = "6f1c2a84-1f0e-4c55-9a57-3d2b1f7a0c11"


def _example_spec() -> dict[str, Any]:
    document = yaml.safe_load((REPO / "examples" / "telemetryreceiver.yaml").read_text())
    spec: dict[str, Any] = document["spec"]
    return spec


CASES: dict[str, dict[str, Any]] = {
    "complete": _example_spec(),
    "minimal": {},
    "scheduled": {
        "replicas": 3,
        "receiver": {
            "auth": {"tokenSecretRef": {"name": "push-token", "key": "value"}},
            "tls": {"mode": "secret", "secretName": "receiver-cert", "minVersion": "TLSv1.3",
                    "clientAuth": {"caSecretRef": {"name": "broker-ca"}, "allowedSubjects": ["broker-0", "broker-1"]}},
            "producerProperties": {"security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-512"},
            "producerPropertiesFromSecrets": {
                "sasl.username": {"name": "kafka-user", "key": "username"},
                "sasl.password": {"name": "kafka-user", "key": "password"},
            },
        },
        "kafka": {"bootstrapServers": "kafka-bootstrap.kafka:9093", "secretRef": {"name": "kafka-client"}},
        "topic": {"name": "telemetry.raw", "partitions": 12},
        "networkPolicy": {
            "enabled": True,
            "from": [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "kafka"}}}],
        },
        "aggregation": {
            "mode": "scheduled",
            "schedule": "*/15 * * * *",
            "sinkClaimName": "kct-aggregates",
            "driver": {"serviceAccount": "kct-spark"},
        },
    },
}


# Stand-ins for the PEMs `ensure_certificates` makes (random keys): the builders copy them, never parse them.
GOLDEN_TLS = TlsMaterial(
    ca=KeyPair("<ca.crt>\n", "<ca.key>\n"),
    previous_ca=KeyPair("<previous-ca.crt>\n", "<previous-ca.key>\n"),
    serving=KeyPair("<tls.crt>\n", "<tls.key>\n"),
    serving_not_after=dt.datetime(2026, 4, 1, tzinfo=dt.UTC),
    ca_not_after=dt.datetime(2031, 1, 1, tzinfo=dt.UTC),
)


def params_for(case: str) -> ReceiverParams:
    return ReceiverParams(
        name="telemetry",
        namespace="observability",
        uid=UID,
        spec=parse_receiver_spec(CASES[case]),
        bootstrap_servers="kafka-bootstrap.kafka:9092",
        generated_token="golden-token",
        tls=GOLDEN_TLS,
        version="golden",
    )


@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.parametrize("build", BUILDERS, ids=lambda b: b.__name__)
def test_builder_output_matches_golden_file(case: str, build: Any) -> None:
    """Given a receiver spec, When a builder renders it, Then the manifest equals its golden file
    (absent object = `null`)."""
    rendered = yaml.safe_dump(build(params_for(case)), sort_keys=False, width=110)
    path = GOLDEN / case / f"{build.__name__.removeprefix('render_')}.yaml"
    if UPDATE:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(rendered)
    assert path.exists(), f"{path} missing: run with KCT_UPDATE_GOLDEN=1"
    assert rendered == path.read_text(), f"{path} differs: rerun with KCT_UPDATE_GOLDEN=1 if intended"
