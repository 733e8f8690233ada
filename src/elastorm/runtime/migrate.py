"""Ask a running topology's controller to migrate a key group, and wait for the answer.

The request goes through ZooKeeper (``elastorm.zk.requests``), the same path
the automatic controller's decisions take, so a scripted series of migrations
exercises exactly what adaptation will use.
"""

from __future__ import annotations

import argparse
import logging
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager

from kazoo.client import KazooClient
from kazoo.exceptions import ConnectionLoss, NoAuthError, SessionExpiredError
from kazoo.handlers.threading import KazooTimeoutError

from elastorm.controller.problems import TopologyFacts, why_no_status
from elastorm.controller.requests import FINAL, MigrationRequest, RequestError, RequestState
from elastorm.core.messages import Protocol
from elastorm.errors import UserError, as_user_error
from elastorm.files import SecretFileError, load_keyring
from elastorm.zk.client import make_client
from elastorm.zk.layout import ZkSettings, ZnodeLayout
from elastorm.zk.problems import zk_facts
from elastorm.zk.requests import (
    controller_alive,
    read_operators,
    read_refusal,
    read_request,
    read_status,
    submit_request,
    withdraw_request,
)

log = logging.getLogger(__name__)


def connect(hosts: str, timeout: float = 10.0, *, secret_file: str | None = None) -> KazooClient:
    """A started kazoo client (authenticated with the secret in ``secret_file``, if
    given), or ``UserError`` if ZooKeeper does not answer or the file is unusable."""
    with as_user_error(SecretFileError):
        keyring = load_keyring(secret_file)
    client = make_client(ZkSettings(hosts=hosts, keyring=keyring))
    try:
        client.start(timeout=timeout)
    except KazooTimeoutError:
        client.close()
        raise UserError(f"ZooKeeper at {hosts} does not answer") from None
    return client


@contextmanager
def connected(
    hosts: str, timeout: float = 10.0, *, secret_file: str | None = None
) -> Iterator[KazooClient]:
    """A command's session: :func:`connect`, then stop and close the client at the end;
    a write ZooKeeper's ACLs refuse becomes a ``UserError`` saying what to give."""
    client = connect(hosts, timeout, secret_file=secret_file)
    try:
        yield client
    except NoAuthError:
        raise UserError(
            "ZooKeeper refused the write: this topology is secured (docs/security.md); "
            "give its secret with --secret-file or $ELASTORM_SECRET_FILE"
        ) from None
    finally:
        client.stop()
        client.close()


def add_zookeeper_option(parser: argparse.ArgumentParser) -> None:
    """``--zookeeper HOST:PORT`` of the commands that talk to a running topology
    (unset: the project's, ``ElastormConfig.zookeeper``)."""
    parser.add_argument(
        "--zookeeper",
        default=None,
        help="ZooKeeper host:port (default: this project's, 127.0.0.1:<zookeeper_port>)",
    )


def add_secret_option(parser: argparse.ArgumentParser) -> None:
    """``--secret-file`` of the commands that write to a running topology's znodes
    (default ``$ELASTORM_SECRET_FILE``; unset: none, for a topology without a secret)."""
    parser.add_argument(
        "--secret-file",
        default=os.environ.get("ELASTORM_SECRET_FILE") or None,
        help="file holding the topology's secret (elastorm.auth.secret_file), to write to "
        "its secured znodes and sign requests (default: $ELASTORM_SECRET_FILE)",
    )


def only_operator(topology: str, operators: list[str]) -> str:
    """The keyed operator to migrate when none is named: the topology's only one.

    Raises ``UserError`` naming the operators when there are several (or none).
    """
    if len(operators) == 1:
        return operators[0]
    if not operators:
        raise UserError(
            f"{topology} has no keyed operator with a routing table yet "
            f"(`elastorm status --topology {topology}` says why)"
        )
    raise UserError(f"{topology} has keyed operators {', '.join(operators)}: pass --operator")


def refuse_if_refused(client: KazooClient, topology: str) -> None:
    """Raise ``UserError`` with the controller's reason if it cannot run ``topology``
    (``controller/refused``): nothing a caller waits for would ever come."""
    reason = read_refusal(client, ZnodeLayout(topology))
    if reason is not None:
        raise UserError(f"the controller of {topology} cannot run it: {reason}")


def keyed_operator(client: KazooClient, topology: str, timeout: float) -> str:
    """The topology's only keyed operator, waiting up to ``timeout`` s for the
    controller's first routing table."""
    deadline = time.monotonic() + timeout
    while not (operators := read_operators(client, ZnodeLayout(topology))):
        refuse_if_refused(client, topology)
        if time.monotonic() > deadline:
            break
        time.sleep(0.2)
    return only_operator(topology, operators)


def wait_for_status(client: KazooClient, topology: str, operator: str, timeout: float) -> dict:
    """The controller's published routing status (it appears on its first tick). A read
    that a loaded ZooKeeper drops (connection lost, session expired: the client
    reconnects by itself) is tried again until ``timeout``."""
    deadline = time.monotonic() + timeout
    while (status := _read_status_retrying(client, topology, operator, deadline)) is None:
        refuse_if_refused(client, topology)
        if time.monotonic() > deadline:
            why = why_no_status(zk_facts(client, TopologyFacts(topology=topology, now=time.time())))
            raise UserError(
                f"no controller status for {topology}/{operator} after {timeout:.0f} s: {why} "
                f"(`elastorm status --topology {topology}` asks Nimbus too)"
            )
        time.sleep(0.2)
    return status


def _read_status_retrying(
    client: KazooClient, topology: str, operator: str, deadline: float
) -> dict | None:
    """``read_status``, tried again after a dropped connection until ``deadline``."""
    while True:
        try:
            return read_status(client, ZnodeLayout(topology), operator)
        except (ConnectionLoss, SessionExpiredError) as exc:
            if time.monotonic() > deadline:
                raise UserError(
                    f"ZooKeeper dropped the connection reading {topology}/{operator}'s "
                    f"status ({type(exc).__name__}) and did not come back in time"
                ) from None
            log.warning("ZooKeeper dropped the connection (%s): reading again", type(exc).__name__)
            time.sleep(0.5)


def wait_until_movable(
    client: KazooClient,
    topology: str,
    operator: str,
    key_group: int,
    assisted: bool,
    timeout: float,
) -> dict:
    """Wait until ``key_group`` is not moving and, for CPA/CPAL (``assisted``), until its
    holder has reported the newest checkpoint; return the status then.

    On timeout, return the last status anyway: the controller then refuses the
    request or falls back to direct, and says so.
    """
    deadline = time.monotonic() + timeout
    while True:
        status = wait_for_status(client, topology, operator, timeout)
        ready = key_group not in status["moving"] and (
            not assisted or status.get("assisted", [True] * (key_group + 1))[key_group]
        )
        if ready or time.monotonic() > deadline:
            return status
        time.sleep(0.1)


def wait_for_controller(client: KazooClient, topology: str, timeout: float) -> None:
    """Wait up to ``timeout`` s for a controller to lead ``topology`` (one whose worker
    crashed takes Storm's restart to come back); returns either way, and the request
    then says whether one leads."""
    deadline = time.monotonic() + timeout
    while not controller_alive(client, ZnodeLayout(topology)):
        refuse_if_refused(client, topology)
        if time.monotonic() > deadline:
            return
        time.sleep(0.2)


def request_migration(
    client: KazooClient,
    topology: str,
    operator: str,
    key_group: int,
    target: int | str,
    protocol: Protocol,
    timeout: float = 60.0,
    *,
    until_stuck: bool = False,
) -> MigrationRequest:
    """Submit a request and wait until it ends (done, refused, abandoned; or, with
    ``until_stuck``, reported stuck by the controller); return its latest form.

    Refuses at once if the topology's controller is not running. A request still
    pending at the timeout is withdrawn, so a late controller does not act on it.
    """
    with as_user_error(RequestError):
        request = MigrationRequest(
            operator=operator, key_group=key_group, target=target, protocol=protocol
        )
    if not controller_alive(client, ZnodeLayout(topology)):
        raise UserError(
            f"the controller of {topology}/{operator} is not running "
            "(topology killed, or not an elastic topology); nothing was requested"
        )
    name = submit_request(client, ZnodeLayout(topology), request)
    ends = set(FINAL) | ({RequestState.STUCK} if until_stuck else set())
    deadline = time.monotonic() + timeout
    while True:
        with as_user_error(RequestError):  # refused as unreadable (e.g. its signature)
            current = read_request(client, ZnodeLayout(topology), name)
        if current.state in ends:
            return current
        if time.monotonic() > deadline:
            if current.state is RequestState.PENDING and withdraw_request(
                client, ZnodeLayout(topology), name
            ):
                raise UserError(
                    f"migration request {name} not picked up by the controller in "
                    f"{timeout:.0f} s; withdrawn"
                )
            current = read_request(client, ZnodeLayout(topology), name)
            raise UserError(
                f"migration request {name} still {current.state.value} after {timeout:.0f} s"
                + (f" ({current.detail})" if current.detail else "")
            )
        time.sleep(0.05)
