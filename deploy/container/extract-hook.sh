#!/usr/bin/env bash
# mmdebstrap's extract hook for build.sh; ROOT is the root file system
# being made, after the packages were extracted and before apt's lists and
# cache are cleaned:
#   - removes the build machine's resolv.conf and hostname (the runtime
#     provides its own; they would make the tree depend on the machine);
#   - takes from the same suite, without their dependencies, base-passwd
#     (root's /etc/passwd and /etc/group, for names profd looks up) and
#     ca-certificates (the CA bundle rustls reads for sinks over HTTPS,
#     concatenated as update-ca-certificates would);
#   - records every package the tree holds in /var/lib/dpkg/status.d/NAME,
#     the control file of each, where image scanners look in images without
#     dpkg.
set -euo pipefail

root=${1:?usage: extract-hook.sh ROOT}
[[ -n ${MMDEBSTRAP_APT_CONFIG:-} ]] || {
    echo "extract-hook.sh: run by mmdebstrap as an --extract-hook (MMDEBSTRAP_APT_CONFIG is unset)" >&2
    exit 1
}

rm -f "$root/etc/resolv.conf" "$root/etc/hostname"

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
chmod 0755 "$work"
(cd "$work" && APT_CONFIG=$MMDEBSTRAP_APT_CONFIG apt-get download -qq -o APT::Sandbox::User=root base-passwd ca-certificates)
mkdir "$work/x"
for deb in "$work"/*.deb; do
    dpkg-deb -x "$deb" "$work/x"
done

install -D -m 0644 "$work/x/usr/share/base-passwd/passwd.master" "$root/etc/passwd"
install -D -m 0644 "$work/x/usr/share/base-passwd/group.master" "$root/etc/group"
mkdir -p "$root/etc/ssl/certs"
find "$work/x/usr/share/ca-certificates" -name '*.crt' -print0 | LC_ALL=C sort -z |
    xargs -0 cat >"$root/etc/ssl/certs/ca-certificates.crt"
[[ -s $root/etc/ssl/certs/ca-certificates.crt ]] || {
    echo "extract-hook.sh: ca-certificates held no certificates" >&2
    exit 1
}
for pkg in base-passwd ca-certificates; do
    install -D -m 0644 "$work/x/usr/share/doc/$pkg/copyright" "$root/usr/share/doc/$pkg/copyright"
done

mkdir -p "$root/var/lib/dpkg/status.d"
for deb in "$root"/var/cache/apt/archives/*.deb "$work"/*.deb; do
    name=$(dpkg-deb --field "$deb" Package)
    dpkg-deb --field "$deb" >"$root/var/lib/dpkg/status.d/$name"
done
