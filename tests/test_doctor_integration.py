"""`proxmox-network-controller doctor` explains which step a network waits on and until when."""

from __future__ import annotations

import json

import pytest

from controller import doctor
from tests.support.controller import running_controller
from hack.tools.objects import unique
from tests.test_lifecycle_integration import Env, ready_network

pytestmark = pytest.mark.integration


def test_doctor_names_the_step_and_the_deadline(admin_client, cluster, unique_namespace, capsys):
    from hack.tools.objects import Admin

    admin = Admin(admin_client)
    env = Env(admin, unique_namespace)
    ns, sub = unique_namespace, unique("sub")
    with running_controller(cluster, subnet_prune_timeout=600):
        ready_network(env, "stuck", sub, "p")
        admin.co.delete_namespaced_custom_object("proxmox.cozystack.io", "v1alpha1", ns, "proxmoxnetworks", "stuck")
        env.wait("stuck", "Ready", "SubnetStillExists")
        env.delete_subnet(sub)
        env.wait("stuck", "Ready", "SwitchDeleting")
    start = json.loads(admin.vlan(sub)["metadata"]["annotations"]["proxmox.cozystack.io/deleted-subnets"])[sub]
    rc = doctor.main(["--kubeconfig", str(cluster.admin_kubeconfig), "-n", ns, "stuck"])
    out = capsys.readouterr().out
    assert rc == 0
    assert f"{ns}/stuck: Ready=False (SwitchDeleting)" in out
    assert f"Kube-OVN lists ['{sub}'] on the Vlan" in out
    assert f"prune timer for {sub}: started {start}, VLAN released at" in out
    assert "runbook: docs/runbook.md, section SwitchDeleting" in out
