#!/bin/sh
# An aarch64 CPython to run under qemu-user, for `make test-wheel`: Debian
# 12's python3.11 and the libraries it loads, unpacked into a directory
# (default _build/wheel/aarch64-root). Debian's interpreter is linked
# statically to libpython, so a wheel that imports there needs no shared
# libpython. Needs root, apt and Debian's package mirror; on failure the
# aarch64 run in python/tests/test_wheel.py skips and says so.
set -eu
root=$(realpath -m "${1:-_build/wheel/aarch64-root}")
[ -x "$root/usr/bin/python3.11" ] && command -v qemu-aarch64-static >/dev/null && exit 0
command -v qemu-aarch64-static >/dev/null || apt-get install -y -qq qemu-user-static >/dev/null
if ! dpkg --print-foreign-architectures | grep -qx arm64; then
    dpkg --add-architecture arm64
    apt-get update -qq
fi
debs=$(mktemp -d)
cd "$debs"
apt-get download -qq python3.11-minimal:arm64 libpython3.11-minimal:arm64 libpython3.11-stdlib:arm64 \
    libc6:arm64 libexpat1:arm64 zlib1g:arm64 libffi8:arm64 libssl3:arm64 libbz2-1.0:arm64 liblzma5:arm64 \
    libsqlite3-0:arm64 libuuid1:arm64 libncursesw6:arm64 libtinfo6:arm64 libreadline8:arm64 libcrypt1:arm64 \
    libgcc-s1:arm64 libstdc++6:arm64 libdb5.3:arm64 libgdbm6:arm64 libnsl2:arm64 libtirpc3:arm64 2>/dev/null
mkdir -p "$root"
for d in *.deb; do dpkg-deb -x "$d" "$root"; done
rm -rf "$debs"
qemu-aarch64-static -L "$root" "$root/usr/bin/python3.11" -c 'import platform; print("aarch64 python", platform.python_version(), "in", "'"$root"'")'
