#!/usr/bin/env bash
# image_cli.sh TRAINYARD: `trainyard image load | ls | rm` on a store in a temp dir, with
# the busybox image of make_busybox_image.sh (docs/images.md). Exit 77 (skipped) without
# Debian's busybox-static.
set -euo pipefail
T=$1
here=$(cd "$(dirname "$0")" && pwd)
fail() {
  echo "FAIL: $*" >&2
  exit 1
}
if [[ ! -x /bin/busybox ]]; then
  echo "SKIP: no /bin/busybox (install busybox-static: scripts/setup)"
  exit 77
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
store=$tmp/store

digest=$("$here/make_busybox_image.sh" "$tmp/busybox.tar" busybox:test)
out=$("$T" image load "$tmp/busybox.tar" --store "$store") || fail "load exited $?: $out"
[[ $out == "loaded busybox:test $digest ("*" MiB, 1 layer) into $store" ]] || fail "load said: $out"

# Loading again only adds the new name.
out=$("$T" image load "$tmp/busybox.tar" --store "$store" -t bb:1) || fail "reload exited $?"
[[ $out == "loaded bb:1, busybox:test $digest"* ]] || fail "reload said: $out"

ls_out=$("$T" image ls --store "$store")
grep -q "^REF  *DIGEST  *SIZE  *LOADED" <<<"$ls_out" || fail "no header: $ls_out"
grep -q "^busybox:test  *${digest:7:12}  *[0-9.]* MiB" <<<"$ls_out" || fail "no busybox:test row: $ls_out"
grep -q "^bb:1  *${digest:7:12}" <<<"$ls_out" || fail "no bb:1 row: $ls_out"

json=$("$T" image ls --store "$store" -o json)
grep -q "\"digest\":\"$digest\"" <<<"$json" || fail "json lacks the digest: $json"
grep -q '"refs":\["bb:1","busybox:test"\]' <<<"$json" || fail "json lacks the refs: $json"
grep -q '"env":\["PATH=/bin"\]' <<<"$json" || fail "json lacks the env: $json"
rootfs=$store/images/${digest:7}/rootfs
[[ -x $rootfs/bin/busybox && -L $rootfs/bin/sh ]] || fail "no busybox in $rootfs"
[[ $(stat -c %a "$rootfs/tmp") == 1777 ]] || fail "/tmp is not 1777"
if [[ $(id -u) -eq 0 ]] && command -v chroot > /dev/null; then
  said=$(chroot "$rootfs" /bin/sh -c 'echo hello from $(id -u)') || fail "sh in the rootfs failed"
  [[ $said == "hello from 0" ]] || fail "sh in the rootfs said: $said"
fi

# Bad input: exit 2 with the file named.
echo "not a tarball" > "$tmp/bad.tar"
set +e
msg=$("$T" image load "$tmp/bad.tar" --store "$store" 2>&1)
rc=$?
set -e
[[ $rc -eq 2 ]] || fail "bad tarball: exit $rc, want 2"
grep -q "$tmp/bad.tar: not a readable tar archive" <<<"$msg" || fail "bad tarball said: $msg"

# rm: the image stays while a name is left, then goes.
"$T" image rm busybox:test --store "$store" > /dev/null || fail "rm busybox:test"
[[ -d $rootfs ]] || fail "the image went with a name left"
set +e
msg=$("$T" image rm busybox:test --store "$store" 2>&1)
rc=$?
set -e
[[ $rc -eq 2 ]] || fail "rm of a missing ref: exit $rc, want 2"
grep -q 'image "busybox:test" is not in the image store' <<<"$msg" || fail "rm said: $msg"
"$T" image rm bb:1 --store "$store" > /dev/null || fail "rm bb:1"
[[ ! -e $rootfs ]] || fail "the image stayed with no name"
[[ $("$T" image ls --store "$store" -o json) == "[]" ]] || fail "the store is not empty"
echo "ok"
