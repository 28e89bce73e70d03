#!/usr/bin/env bash
# make_busybox_image.sh OUT.tar NAME[:TAG]: writes a docker-archive image tarball (what
# `docker save` writes; `trainyard image load` and `docker load` read it) of one layer:
# Debian's static busybox (package busybox-static) with its applets as symlinks in /bin,
# a minimal /etc/passwd and /etc/group, /tmp (1777), and the config Env PATH=/bin,
# Cmd ["sh"]. The container executor's tests run ranks in it.
#
# The same busybox gives the same bytes, so the same image digest: fixed times, sorted
# entries, owner 0:0 by number, no timestamps in the config. Only coreutils, GNU tar,
# sha256sum and printf. BUSYBOX=PATH picks another static busybox binary.
set -euo pipefail

if [[ $# -ne 2 ]]; then
  echo "usage: $0 OUT.tar NAME[:TAG]" >&2
  exit 2
fi
out=$1
ref=$2
[[ $ref == *:* && ${ref##*/} == *:* ]] || ref="$ref:latest"
busybox=${BUSYBOX:-/bin/busybox}
if [[ ! -x $busybox ]]; then
  echo "$0: no busybox at $busybox; install Debian's busybox-static (scripts/setup)" >&2
  exit 1
fi
if command -v ldd > /dev/null && [[ $(ldd "$busybox" 2>&1 || true) != *"not a dynamic executable"* ]]; then
  echo "$0: $busybox is dynamically linked; the image needs busybox-static's" >&2
  exit 1
fi

# The applets the executor's tests use, and a few more that shell scripts reach for.
applets=(sh ash sleep cat echo env id ls kill true false mkdir touch wc head tail grep printf
  date rm ps cp mv ln chmod pwd hostname uname test "[" sed awk seq nproc whoami stat dirname
  basename tee sort uniq timeout find xargs yes expr readlink cut tr du df free setsid
  sha256sum mktemp realpath nc wget)
available=" $("$busybox" --list | tr '\n' ' ') "
for a in "${applets[@]}"; do
  if [[ $available != *" $a "* ]]; then
    echo "$0: $busybox has no applet $a" >&2
    exit 1
  fi
done

case $(uname -m) in
  x86_64) arch=amd64 ;;
  aarch64) arch=arm64 ;;
  *) arch=$(uname -m) ;;
esac

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
umask 022
root=$work/rootfs
mkdir -p "$root"/{bin,dev,etc,proc,root,sys,tmp}
cp "$busybox" "$root/bin/busybox"
chmod 0755 "$root/bin/busybox"
for a in "${applets[@]}"; do
  ln -s busybox "$root/bin/$a"
done
printf '%s\n' 'root:x:0:0:root:/root:/bin/sh' \
  'nobody:x:65534:65534:nobody:/nonexistent:/bin/false' > "$root/etc/passwd"
printf '%s\n' 'root:x:0:' 'nogroup:x:65534:' > "$root/etc/group"
chmod 0644 "$root/etc/passwd" "$root/etc/group"
chmod 0755 "$root"/{bin,dev,etc,proc,sys}
chmod 0700 "$root/root"
chmod 1777 "$root/tmp"

# Reproducible tar: sorted names, one fixed time, numeric owner 0:0, no extended headers.
det_tar() {
  tar --format=gnu --sort=name --mtime=@0 --owner=0 --group=0 --numeric-owner \
    --no-acls --no-xattrs --no-selinux "$@"
}

image=$work/image
mkdir -p "$image"
det_tar -C "$root" -cf "$work/layer.tar" bin dev etc proc root sys tmp
layer=$(sha256sum "$work/layer.tar" | cut -d' ' -f1)
mkdir "$image/$layer"
mv "$work/layer.tar" "$image/$layer/layer.tar"
printf '1.0' > "$image/$layer/VERSION"

printf '{"architecture":"%s","os":"linux","config":{"Env":["PATH=/bin"],"Cmd":["sh"],"WorkingDir":"/"},"rootfs":{"type":"layers","diff_ids":["sha256:%s"]},"history":[{"created_by":"tests/containers/make_busybox_image.sh"}]}' \
  "$arch" "$layer" > "$work/config.json"
config=$(sha256sum "$work/config.json" | cut -d' ' -f1)
mv "$work/config.json" "$image/$config.json"

name=${ref%:*}
tag=${ref##*:}
printf '[{"Config":"%s.json","RepoTags":["%s"],"Layers":["%s/layer.tar"]}]' \
  "$config" "$ref" "$layer" > "$image/manifest.json"
printf '{"%s":{"%s":"%s"}}' "$name" "$tag" "$layer" > "$image/repositories"
chmod -R u=rwX,go=rX "$image"

det_tar -C "$image" -cf "$work/out.tar" .
mv "$work/out.tar" "$out"
echo "sha256:$config"
