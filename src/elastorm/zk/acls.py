"""ZooKeeper ACLs of a topology with a secret (``elastorm.auth.secret_file``).

Every znode of the topology is readable by anyone and changed only by the digest
identity derived from the secret (``elastorm.core.auth.digest_identity``), with two
exceptions for the parts elastorm's Java scheduler writes in Nimbus, which holds no
secret: ``scheduler/`` lets anyone create in it and ``scheduler/placement`` is open.
The root every topology shares (``/elastorm``) stays open, as before.

:func:`secure_tree` gives znodes made before the secret (or by the Java scheduler, or
under the previous secret while rotating) the ACL they should have; the controller runs
it as it starts. See docs/security.md.
"""

from __future__ import annotations

import logging

from kazoo.client import KazooClient
from kazoo.exceptions import NoAuthError, NodeExistsError, NoNodeError
from kazoo.security import ACL, OPEN_ACL_UNSAFE, make_acl, make_digest_acl

from elastorm.controller.scaling import NodeSet, encode_node_set
from elastorm.core.auth import Keyring, digest_identity
from elastorm.zk.layout import ZnodeLayout

log = logging.getLogger(__name__)

SCHEDULER = "scheduler"
PLACEMENT = "placement"
ARCHIVE = "archive"  # earlier submissions' znodes: set aside, never acted on


def digest_auth(ring: Keyring) -> list[tuple[str, str]]:
    """kazoo's ``auth_data`` for the digest identities of every secret of ``ring`` (the
    previous one too: znodes created under it stay writable while rotating)."""
    return [("digest", ":".join(digest_identity(secret))) for secret in ring.secrets]


def acl_for(path: str, ring: Keyring) -> list[ACL]:
    """The ACL of znode ``path`` of a topology whose secret is ``ring``'s current one.

    >>> acl_for("/elastorm", Keyring(current=b"k")) == OPEN_ACL_UNSAFE
    True
    """
    parts = path.rstrip("/").split("/")
    if len(parts) <= 2 or parts[-2:] == [SCHEDULER, PLACEMENT]:
        return list(OPEN_ACL_UNSAFE)
    user, password = digest_identity(ring.current)
    owner = make_digest_acl(user, password, all=True)
    anyone_creates = parts[-1] == SCHEDULER
    return [make_acl("world", "anyone", read=True, create=anyone_creates), owner]


def secure_tree(client: KazooClient, layout: ZnodeLayout, ring: Keyring) -> int:
    """Set :func:`acl_for` on every znode of ``layout``'s topology that has another ACL
    (but ``archive/``), and create an empty ``scheduler/nodes`` (every node wanted, as
    none written) so nobody else creates it; returns how many ACLs changed. A znode
    whose ACL this identity may not change is logged and left."""
    changed = 0
    pending = [layout.base]
    while pending:
        path = pending.pop()
        try:
            acl = client.get_acls(path)[0]
            children = client.get_children(path)
            if sorted(acl) != sorted(acl_for(path, ring)):
                client.set_acls(path, acl_for(path, ring))
                changed += 1
        except NoNodeError:
            continue
        except NoAuthError:
            log.warning("auth: the ACL of %s is not ours to change; left as it is", path)
            continue
        pending.extend(
            f"{path}/{c}" for c in children if f"{path}/{c}" != f"{layout.base}/{ARCHIVE}"
        )
    try:
        client.create(layout.scheduler_nodes, encode_node_set(NodeSet()), makepath=True)
    except NodeExistsError:
        pass
    return changed
