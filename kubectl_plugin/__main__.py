"""``python3 -m kubectl_plugin doctor …`` from a checkout, without installing the console
script (the same entry point as ``kubectl-proxmox_network``)."""

import sys

from kubectl_plugin import main

sys.exit(main())
