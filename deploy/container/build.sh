#!/usr/bin/env bash
# Builds the container image deploy/kubernetes/profd-daemonset.yaml runs.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(dirname "$(dirname "$here")")

# What profd and profctl load besides the kernel's vDSO (`ldd`): the C
# library (libc6, whose libm and loader come with it), the unwinder
# (libgcc-s1) and xz (liblzma5, for MiniDebugInfo). The build checks,
# inside the tree, that the loader finds every one of them.
PACKAGES=(libc6 libgcc-s1 liblzma5)

usage() {
    cat <<EOF
Usage: deploy/container/build.sh [OPTIONS]

Builds the image profd:$version (the version in Cargo.toml), the one
deploy/kubernetes/profd-daemonset.yaml names:
  1. mmdebstrap extracts the Debian packages profd and profctl need
     (libc6, libgcc-s1, liblzma5) into an empty root file system, with
     root's passwd and group entries and the CA bundle, and nothing else:
     no shell, no package manager;
  2. deploy/install.sh installs profd, profctl, their man pages, settings
     and completions into it (PREFIX=/usr), and the loader inside it must
     find every library both binaries load;
  3. buildah builds deploy/container/Containerfile from that tree:
     entrypoint /usr/bin/profd, arguments --config /etc/profd/profd.toml
     (where the DaemonSet mounts its ConfigMap).
Run as root, with mmdebstrap and buildah installed; the image goes
to the containers storage podman and buildah share. The files of its
layer and its creation time are stamped with SOURCE_DATE_EPOCH (default:
the time of the checkout's last commit), so the same commit, packages and
binaries give the same image id.

Options:
  --binaries DIR  install the profd and profctl already built in DIR (e.g.
                  target/release, or target/debug for a test); without it
                  deploy/install.sh builds them (cargo build --release)
  --tag NAME      the image's name (default: profd:$version)
  --suite NAME    the Debian suite the packages come from (default: bookworm)
  --mirror URL    the Debian mirror (default: http://deb.debian.org/debian);
                  a snapshot, e.g.
                  http://snapshot.debian.org/archive/debian/20250520T000000Z,
                  pins every package's version
  --rootfs DIR    make the root file system in DIR, which must be empty or
                  absent, and keep it (default: a temporary directory)
  -h, --help      this text

Then push it where the nodes pull from, and set the DaemonSet's image:
  podman push profd:$version registry.example.com/profd:$version
EOF
}

die() {
    echo "build.sh: $*" >&2
    exit 1
}

need() {
    command -v "$1" >/dev/null || die "$1 is missing: install the Debian package $2 (apt-get install $2)"
}

version=$(sed -n '/^\[workspace.package\]/,/^\[/s/^version = "\(.*\)"$/\1/p' "$repo/Cargo.toml")
[[ -n $version ]] || die "no version in [workspace.package] of $repo/Cargo.toml"
tag=profd:$version
suite=bookworm
mirror=http://deb.debian.org/debian
binaries=
rootfs=
while (($#)); do
    case $1 in
    -h | --help)
        usage
        exit 0
        ;;
    --binaries | --tag | --suite | --mirror | --rootfs)
        (($# >= 2)) || die "$1 needs a value (see --help)"
        case $1 in
        --binaries) binaries=$2 ;;
        --tag) tag=$2 ;;
        --suite) suite=$2 ;;
        --mirror) mirror=$2 ;;
        --rootfs) rootfs=$2 ;;
        esac
        shift 2
        ;;
    *) die "unknown argument $1 (see --help)" ;;
    esac
done

[[ $(id -u) == 0 ]] || die "run as root: mmdebstrap, chroot and the image storage need it"
need mmdebstrap mmdebstrap
need buildah buildah

if [[ -n $binaries ]]; then
    [[ -d $binaries ]] || die "--binaries $binaries is not a directory"
    binaries=$(cd "$binaries" && pwd)
    for bin in profd profctl; do
        [[ -x $binaries/$bin ]] || die "--binaries: $binaries/$bin is not an executable (build it first)"
    done
fi
if [[ -z ${SOURCE_DATE_EPOCH:-} ]]; then
    SOURCE_DATE_EPOCH=$(git -C "$repo" log -1 --format=%ct 2>/dev/null) ||
        die "$repo is not a git checkout: set SOURCE_DATE_EPOCH to the seconds since 1970 the image is stamped with"
fi
[[ $SOURCE_DATE_EPOCH =~ ^[0-9]+$ ]] || die "SOURCE_DATE_EPOCH must be seconds since 1970 (it is $SOURCE_DATE_EPOCH)"
export SOURCE_DATE_EPOCH

if [[ -n $rootfs ]]; then
    [[ ! -e $rootfs || -z $(ls -A "$rootfs") ]] || die "--rootfs $rootfs is not empty"
else
    scratch=$(mktemp -d)
    trap 'rm -rf "$scratch"' EXIT
    rootfs=$scratch/rootfs
fi

echo "== root file system: ${PACKAGES[*]} from $suite ($mirror) into $rootfs"
mmdebstrap --variant=extract --format=directory \
    --include="$(
        IFS=,
        echo "${PACKAGES[*]}"
    )" \
    --extract-hook="\"$here/extract-hook.sh\" \"\$1\"" \
    "$suite" "$rootfs" "$mirror"

echo "== profd and profctl: deploy/install.sh"
BINARIES=$binaries PREFIX=/usr DESTDIR=$rootfs "$repo/deploy/install.sh" >/dev/null
# Mount points of the DaemonSet's volumes (the root is read-only there).
mkdir -p "$rootfs/run/profd" "$rootfs/var/lib/profd" "$rootfs/tmp"
chmod 1777 "$rootfs/tmp"

echo "== libraries, as the loader inside the tree finds them"
for bin in profd profctl; do
    if ! libs=$(chroot "$rootfs" /lib64/ld-linux-x86-64.so.2 --list "/usr/bin/$bin" 2>&1) ||
        grep -q 'not found' <<<"$libs"; then
        die "the tree cannot load /usr/bin/$bin: add the Debian package of the library to PACKAGES in $0:"$'\n'"$libs"
    fi
    echo "$bin:"
    sed 's/ (0x[0-9a-f]*)$//' <<<"$libs"
    chroot "$rootfs" "/usr/bin/$bin" --version
done

echo "== image $tag"
id=$(buildah build --quiet --timestamp "$SOURCE_DATE_EPOCH" --build-arg "VERSION=$version" \
    --file "$here/Containerfile" --tag "$tag" "$rootfs")
echo "$tag: image $id"
