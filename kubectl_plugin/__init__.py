"""``kubectl proxmox-network``: the kubectl plugin.

``pip install .`` puts the console script ``kubectl-proxmox_network`` on PATH (pyproject.toml
``[project.scripts]``; kubectl finds a plugin ``proxmox-network`` under that file name, a dash
of the plugin name becoming an underscore). Its one subcommand is ``doctor``, the same code
and output as ``proxmox-network-controller doctor`` (controller/doctor.py). kubectl passes
no flags of its own to a plugin: the kubeconfig is ``--kubeconfig`` or ``$KUBECONFIG``.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

USAGE = """usage: kubectl proxmox-network doctor [--kubeconfig FILE] [-n NAMESPACE] [NAME] [--subnet-prune-timeout D]

Commands:
  doctor   explain which step each ProxmoxNetwork waits on, and until when
           (the same as proxmox-network-controller doctor; doctor --help for its flags)
"""


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["doctor"]:
        from controller import doctor

        return doctor.main(argv[1:])
    if argv[:1] in (["-h"], ["--help"], ["help"]):
        sys.stdout.write(USAGE)
        return 0
    sys.stderr.write(USAGE)
    if argv:
        sys.stderr.write(f"\nunknown command {argv[0]!r}\n")
    return 2


