#!/usr/bin/env bash
# Runs as root inside a fresh sandbox container (sandbox.sh pipes it in):
# the minimum for Ansible to take over over SSH. Idempotent.
# $1: the public key that may log in as `ops`.
set -euo pipefail
pubkey=$1
id ops >/dev/null 2>&1 || useradd --create-home --shell /bin/bash ops
install -d -m 0700 -o ops -g ops /home/ops/.ssh
printf '%s\n' "$pubkey" >/home/ops/.ssh/authorized_keys
chown ops:ops /home/ops/.ssh/authorized_keys
chmod 0600 /home/ops/.ssh/authorized_keys
printf 'ops ALL=(ALL) NOPASSWD: ALL\n' >/etc/sudoers.d/ops
chmod 0440 /etc/sudoers.d/ops
ls /etc/ssh/ssh_host_*_key >/dev/null 2>&1 || ssh-keygen -A >/dev/null
systemctl enable --now ssh.service >/dev/null 2>&1
