# shellcheck shell=bash
# Sourced by the image build scripts (scripts/build-base-image, images/transformers/build-base): one build of an
# image at a time. image_lock NAME takes an exclusive flock on NAME.lock in this user's image lock directory
# ($KIT_IMAGE_LOCK_DIR, default /tmp/kit-image-locks-UID: a directory of this user's, mode 700, so no other user's
# file or link can stand in for a lock), held on fd $LOCK_FD until it is closed or the script exits; it says so on
# stderr when it has to wait. Not $KIT_LOCK_DIR: that is kit's reservation directory, which every test session (and
# test) sets to one of its own, so a fixture and the background build of `make test` would lock different files.
IMAGE_LOCKS="${KIT_IMAGE_LOCK_DIR:-/tmp/kit-image-locks-$(id -u)}"

image_lock() {
  (umask 077 && mkdir -p "$IMAGE_LOCKS")
  if [ -L "$IMAGE_LOCKS" ] || [ ! -O "$IMAGE_LOCKS" ]; then
    echo "image lock: $IMAGE_LOCKS is not a directory of this user's; remove it or set KIT_IMAGE_LOCK_DIR" >&2
    return 1
  fi
  local file="$IMAGE_LOCKS/${1//[^A-Za-z0-9._-]/_}.lock"
  exec {LOCK_FD}>>"$file"
  flock -n "$LOCK_FD" || { echo "image lock: waiting for $file (another build holds it)" >&2; flock "$LOCK_FD"; }
}
