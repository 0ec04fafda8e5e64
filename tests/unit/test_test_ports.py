"""The ports a test's own servers get: a server a test stops and starts again must find
its port free, so none comes from the range the kernel gives outgoing connections."""

from __future__ import annotations

from tests.support.services import ephemeral_ports, free_port


def test_a_free_port_is_never_one_an_outgoing_connection_may_take() -> None:
    ephemeral = ephemeral_ports()
    ports = [free_port() for _ in range(200)]
    assert not [port for port in ports if port in ephemeral]


def test_a_process_is_never_given_the_same_port_twice() -> None:
    # A stopped server's port stays its own until the test starts it again.
    ports = [free_port() for _ in range(200)]
    assert len(set(ports)) == len(ports)
