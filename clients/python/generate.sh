#!/usr/bin/env bash
# Generate the typed Python clients from schema.graphql and
# gql/operations/*.graphql with ariadne-codegen: clients/python/runlog_client/
# (blocking, queries and mutations) and runlog_client_async/ (asyncio, the
# subscription RunLogTail too).
#
# ariadne-codegen runs in a virtualenv of its own (.venv-codegen, gitignored,
# created on first use from requirements-codegen.txt): it needs graphql-core
# below 3.3, the service needs 3.3. The generated package itself needs only
# httpx and pydantic.
#
#   clients/python/generate.sh           regenerate both packages in place
#   clients/python/generate.sh OUT_DIR   write them under OUT_DIR instead
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
# The blocking client is generated from the operations that are not
# subscriptions: ariadne-codegen generates a subscription only for an async
# client, and refuses one otherwise. The async client has them all.
mkdir "$work/operations"
for file in "$here"/../../gql/operations/*.graphql; do
    grep -qE '^[[:space:]]*subscription\b' "$file" || cp "$file" "$work/operations/"
done
sed -e "s|^target_package_path = .*|target_package_path = \"$work\"|" \
    -e "s|^queries_path = .*|queries_path = \"$work/operations\"|" \
    "$here/codegen.toml" >"$work/codegen.toml"
sed "s|^target_package_path = .*|target_package_path = \"$work\"|" \
    "$here/codegen-async.toml" >"$work/codegen-async.toml"
for config in codegen.toml codegen-async.toml; do
    (cd "$here" && "$venv/bin/ariadne-codegen" client --config "$work/$config" >"$work/log") || {
        cat "$work/log" >&2
        exit 1
    }
done

# The header names where the operations came from: the same files, for both.
find "$work/$package" -name '*.py' -exec sed -i "s|^# Source: $work/operations\$|# Source: ../../gql/operations|" {} +

out="${1:-$here}"
mkdir -p "$out"
for generated in "$package" "${package}_async"; do
    rm -rf "${out:?}/$generated"
    mv "$work/$generated" "$out/$generated"
    echo "generate.sh: wrote $out/$generated" >&2
done
