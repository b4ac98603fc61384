#!/bin/sh
# The system packages the test suite needs, installed where missing (Debian/Ubuntu apt; sudo when not root):
# gcc and the C library headers (the fake libnvidia-ml.so.1 is built from C), OpenSSH's server and client
# (real sshd on 127.0.0.1), Prometheus (the fleet tests scrape loopback exporters) and tmux.
set -eu
need=""
command -v gcc >/dev/null 2>&1 || need="$need gcc libc6-dev"
[ -e /usr/include/stdio.h ] || need="$need libc6-dev"
command -v sshd >/dev/null 2>&1 || [ -x /usr/sbin/sshd ] || need="$need openssh-server"
command -v ssh >/dev/null 2>&1 || need="$need openssh-client"
command -v prometheus >/dev/null 2>&1 || [ -x /usr/bin/prometheus ] || need="$need prometheus"
command -v promtool >/dev/null 2>&1 || [ -x /usr/bin/promtool ] || need="$need prometheus"
command -v tmux >/dev/null 2>&1 || need="$need tmux"
[ -z "$need" ] && exit 0
sudo=""
[ "$(id -u)" -eq 0 ] || sudo="sudo"
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -q
# shellcheck disable=SC2086 # one word per package
$sudo apt-get install -y -q --no-install-recommends $need
