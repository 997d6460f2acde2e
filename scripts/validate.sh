#!/usr/bin/env bash
# Sourced by scripts/check-manifests.sh and scripts/check-chart.sh (not run on its own):
# strict validation of one rendered document against one Kubernetes schema.
#
#   source scripts/validate.sh
#   validate_doc DOC LABEL VERSION || failed=1
#
# Needs kubernetes-validate (pip install kubernetes-validate).

# Prints "ok" or the failure (with LABEL in place of the file's name) and returns 1 on a
# failure. kubernetes-validate passes a kind it has no schema for, with a warning: a CRD
# would pass unchecked, so that warning fails too.
validate_doc() {
    local doc=$1 label=$2 version=$3 out
    if out=$(kubernetes-validate --strict --quiet -k "$version" "$doc" 2>&1) \
        && ! grep -q "Couldn't find schema" <<<"$out"; then
        echo "ok    $label against $version"
    else
        echo "FAIL  $label against $version:" >&2
        echo "${out//$doc/$label}" >&2
        return 1
    fi
}
