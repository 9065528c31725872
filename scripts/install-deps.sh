#!/usr/bin/env bash
# Installs what kiln needs from Debian's packages. Idempotent and quiet when
# everything is present. Test-only peers (python3-torch) come with --test/--bench.
set -euo pipefail
need=(cmake make gcc pkg-config libdnnl-dev zlib1g-dev dataset-fashion-mnist)
case "${1:-}" in
  --test) ;;   # fixtures are committed: the suite needs no PyTorch
  --bench|--oracle) need+=(python3-torch python3-numpy) ;;
esac
missing=()
for p in "${need[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0
echo "install-deps: installing ${missing[*]}"
SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
