# shellcheck shell=bash
# revision: the commit a release build records (build.rs reads METAINIT_REVISION), as an
# image build is given it: HEAD's, else "unknown". scripts/image-check.sh and the node's image
# (scripts/node/build.sh) pass the same one, so the second static build is cargo's no-op
# rather than a rebuild (build.rs reruns, and the crate with it, when the variable changes).
revision() {
  git -C "$(dirname "${BASH_SOURCE[0]}")/../.." rev-parse --verify HEAD 2>/dev/null || echo unknown
}
