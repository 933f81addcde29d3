"""Emulated peers of the controller for the test bed (product-decisions.md §5).

They are test code, not product code: each one runs threads against the cluster as the admin
and imitates the documented behaviour of a peer that cannot run here.

* :class:`KubeOvnEmulator` (``kubeovn.py``): Subnet finalizer, conditions and NB switch /
  localnet / router port, ``Vlan.status.subnets`` and ``status.conflict``; delete fault modes.
* :class:`IpamEmulator` (``ipam.py``): in-cluster IPAM ``InClusterIPPool`` status counts,
  the ``ProtectPool`` finalizer and IPAddressClaim fulfilment.
"""

from .ipam import IpamEmulator
from .kubeovn import KubeOvnEmulator

__all__ = ["IpamEmulator", "KubeOvnEmulator"]
