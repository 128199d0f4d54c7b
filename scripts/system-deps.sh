#!/usr/bin/env bash
# Installs the system packages Penumbra needs when they are missing: a Python venv,
# Java 17 (Spark), redis-server, Chromium (the dashboard's browser tests). Debian/apt; runs
# apt-get only when something is missing.
set -euo pipefail

missing=()
python3 -c 'import ensurepip, venv' 2>/dev/null || missing+=(python3-venv)
java_major=$( (java -version 2>&1 || true) | sed -n 's/.*version "\([0-9]*\).*/\1/p' | head -n1)
if [ -z "$java_major" ] || [ "$java_major" -lt 17 ]; then missing+=(openjdk-17-jre-headless); fi
command -v redis-server >/dev/null 2>&1 || missing+=(redis-server)
[ -x /usr/bin/chromium ] || missing+=(chromium)

if [ ${#missing[@]} -eq 0 ]; then exit 0; fi
echo "installing system packages: ${missing[*]}"
sudo=""
[ "$(id -u)" -eq 0 ] || sudo="sudo"
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -qq
$sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
