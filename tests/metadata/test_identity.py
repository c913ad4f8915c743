"""The identity keys fetched from the fake over real HTTP: values, 404 as "not there", failures returned."""

from __future__ import annotations

from watchdog.core.identity import ACCELERATOR_TYPE, IDENTITY_PATHS, TPU_ENV, WORKER_ID, identity_from
from watchdog.fake.server import FakeMetadataServer, Fault
from watchdog.metadata.errors import ErrorKind
from watchdog.metadata.identity import fetch_identity
from watchdog.metadata.transport import MetadataTransport


def test_every_key_of_the_fakes_default_vm(fake: FakeMetadataServer, transport: MetadataTransport) -> None:
    fetched = fetch_identity(transport, IDENTITY_PATHS)
    assert fetched.failed == {}
    identity, problems = identity_from(fetched.values)
    assert problems == []
    assert identity.instance_id == "4520031799277581759"
    assert (identity.zone, identity.accelerator_type, identity.worker_id) == ("us-central2-b", "v4-8", "0")
    assert identity.tpu_node == "fake-tpu"
    assert identity.slice_hosts == 1
    assert identity.multislice_coordinator == ""  # one slice: no Megascale keys


def test_404_answers_and_503_fails(fake: FakeMetadataServer, transport: MetadataTransport) -> None:
    fake.delete(WORKER_ID)
    fake.add_fault(Fault("status", status=503, path=TPU_ENV, count=1))
    fetched = fetch_identity(transport, [WORKER_ID, TPU_ENV, ACCELERATOR_TYPE])
    assert fetched.values == {WORKER_ID: None, ACCELERATOR_TYPE: "v4-8"}
    assert fetched.failed[TPU_ENV].kind is ErrorKind.HTTP_5XX
    again = fetch_identity(transport, [TPU_ENV])  # the fault was for one request: asked again, it answers
    assert again.failed == {}
    assert "NODE_ID: 'fake-tpu'" in (again.values[TPU_ENV] or "")
