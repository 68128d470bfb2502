#!/usr/bin/env bash
# Debian's Slurm, munge and MariaDB, for tests/test_slurm.py (a real single-node Slurm, scripts/minislurm.py) and for
# trying a sweep through Slurm on this machine. Run by scripts/test.sh; by hand: sudo bash scripts/install_slurm.sh.
# Installs only (never removes a package); the packages' own scripts start no service while installing (no systemd
# here: minislurm.py starts the daemons itself). Exits 0 and says why when it cannot install (not root, no apt-get).
set -euo pipefail
pkgs="slurmctld slurmd slurm-client slurmdbd munge mariadb-server"
need() { for c in slurmctld slurmd slurmdbd sbatch sacct munged mungekey mariadbd mariadb-install-db; do command -v "$c" >/dev/null || return 0; done; return 1; }
if ! need; then exit 0; fi
if [ "$(id -u)" != 0 ]; then echo "install_slurm.sh: not root, Slurm not installed (tests/test_slurm.py will be skipped)" >&2; exit 0; fi
if ! command -v apt-get >/dev/null; then echo "install_slurm.sh: no apt-get, Slurm not installed (tests/test_slurm.py will be skipped)" >&2; exit 0; fi
export DEBIAN_FRONTEND=noninteractive
made=""
if [ ! -e /usr/sbin/policy-rc.d ]; then   # tell the packages' scripts not to start their services
  printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d; chmod +x /usr/sbin/policy-rc.d; made=1
fi
trap '[ -z "$made" ] || rm -f /usr/sbin/policy-rc.d' EXIT
echo "Installing $pkgs (for tests/test_slurm.py)..." >&2
install() { apt-get install -y -q --no-install-recommends $pkgs >/tmp/diffgeo-install-slurm.log 2>&1; }
install || { apt-get update -q >>/tmp/diffgeo-install-slurm.log 2>&1 && install; } ||
  { echo "install_slurm.sh: apt-get failed (log: /tmp/diffgeo-install-slurm.log); tests/test_slurm.py will be skipped" >&2; exit 0; }
