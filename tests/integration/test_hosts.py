"""Several hosts on this machine (``elastorm hosts``): real network namespaces on a
bridge, a real sshd in each, each host's private folder, a host cut off and back."""

from __future__ import annotations

import dataclasses
import os
import shutil
import subprocess

import pytest

from elastorm.runtime.config import load_config
from elastorm.runtime.hosts import HOST_DIR, SSHD, Hosts
from elastorm.runtime.netns import NETNS_DIR

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0 or not SSHD.exists() or shutil.which("ip") is None,
    reason="needs root, iproute2 and openssh-server (bin/setup installs it)",
)


def test_hosts_answer_ssh_keep_private_folders_reach_each_other_and_can_be_cut_off(
    tmp_path,
) -> None:
    # Names and addresses of their own (from this port), so the project's hosts, if
    # any are up, are left alone.
    cfg = dataclasses.replace(load_config(), home=tmp_path / "home", zookeeper_port=22181)
    hosts = Hosts(cfg)
    plan = hosts.up(3)
    try:

        def on(host: str, command: str, timeout: float = 30) -> subprocess.CompletedProcess:
            return subprocess.run(
                hosts.ssh_command(host, command), capture_output=True, text=True, timeout=timeout
            )

        # Each host sees its own folder at HOST_DIR, and a file one host writes there
        # is not seen by another.
        for h in plan.hosts:
            assert on(h.name, f"cat {HOST_DIR}/name").stdout.strip() == h.name
            assert on(h.name, "hostname -I").stdout.split() == [h.address]
        assert on("host0", f"echo mine > {HOST_DIR}/only-here").returncode == 0
        assert on("host1", f"test -e {HOST_DIR}/only-here").returncode == 1
        # Host to host, over the bridge.
        ssh = " ".join(["ssh", *hosts.ssh_options(), f"root@{plan.host('host2').address}"])
        assert on("host0", f"{ssh} cat {HOST_DIR}/name").stdout.strip() == "host2"
        # Cut off: the others get silence (a timeout), not a refusal; back again after.
        hosts.set_link("host2", up=False)
        cut = on("host0", f"{ssh} true")
        assert cut.returncode == 255 and "timed out" in cut.stderr, cut.stderr
        hosts.set_link("host2", up=True)
        assert on("host0", f"{ssh} true").returncode == 0
    finally:
        removed = hosts.down()
    assert removed == ["host0", "host1", "host2"]
    assert not any((NETNS_DIR / h.namespace).exists() for h in plan.hosts)
    assert hosts.plan() is None
