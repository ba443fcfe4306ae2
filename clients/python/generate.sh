#!/usr/bin/env bash
# Generate the typed Python client, clients/python/runlog_client/, from
# schema.graphql and gql/operations/*.graphql with ariadne-codegen.
#
# ariadne-codegen runs in a virtualenv of its own (.venv-codegen, gitignored,
# created on first use from requirements-codegen.txt): it needs graphql-core
# below 3.3, the service needs 3.3. The generated package itself needs only
# httpx and pydantic.
#
#   clients/python/generate.sh           regenerate runlog_client/ in place
#   clients/python/generate.sh OUT_DIR   write OUT_DIR/runlog_client instead
#                                        (clients/check.sh compares it with the committed one)
set -euo pipefail

here="$(cd "$(dirname "$0")" && pwd)"
venv="$here/.venv-codegen"
requirements="$here/requirements-codegen.txt"
package=runlog_client

# (Re)create the generator's venv when it is missing or its pins changed.
if ! cmp -s "$requirements" "$venv/.installed-requirements" 2>/dev/null; then
    echo "generate.sh: creating $venv" >&2
    rm -rf "$venv"
    "${PYTHON:-python3}" -m venv "$venv"
    "$venv/bin/pip" install --quiet --disable-pip-version-check --no-deps -r "$requirements"
    cp "$requirements" "$venv/.installed-requirements"
fi

# Generate into a scratch folder, then move into place: a module left from an
# operation that was removed must not survive in the package.
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
sed "s|^target_package_path = .*|target_package_path = \"$work\"|" \
    "$here/codegen.toml" >"$work/codegen.toml"
(cd "$here" && "$venv/bin/ariadne-codegen" client --config "$work/codegen.toml" >"$work/log") || {
    cat "$work/log" >&2
    exit 1
}

out="${1:-$here}"
mkdir -p "$out"
rm -rf "${out:?}/$package"
mv "$work/$package" "$out/$package"
echo "generate.sh: wrote $out/$package" >&2
