#!/usr/bin/env bash
# Fail when either generated client is out of date with schema.graphql and
# gql/operations/*.graphql, or when the TypeScript usage no longer
# type-checks. Each client is regenerated into a scratch folder and compared
# with the committed files; nothing in the work tree is changed (except
# clients/ts/node_modules, which `npm ci` installs).
#
#   clients/check.sh        (from anywhere; .ci/run calls it as it is)
#
# Needs python3 (3.10+), node and npm, and PyPI and the npm registry for the
# first run (the generator's venv and node_modules are kept for later runs).
# schema.graphql itself is checked against the code by the test suite
# (tests/test_kinds.py).
set -uo pipefail

root="$(cd "$(dirname "$0")/.." && pwd)"
scratch="$(mktemp -d)"
trap 'rm -rf "$scratch"' EXIT
failed=()

step() {
    local name=$1
    shift
    local start=$(date +%s%N) outcome=ok
    echo "== $name"
    "$@" || outcome=FAILED
    local tenths=$((($(date +%s%N) - start) / 100000000))
    echo "   $outcome ($((tenths / 10)).$((tenths % 10))s)"
    [[ $outcome == ok ]] || failed+=("$name")
}

same() {  # committed generated, freshly generated, how to fix
    if diff -ru -x __pycache__ "$1" "$2" >"$scratch/diff"; then
        return 0
    fi
    head -n 60 "$scratch/diff"
    echo "   $1 is not what the generator makes from schema.graphql and gql/operations."
    echo "   Regenerate with: $3   and commit the result."
    return 1
}

python_generate() { "$root/clients/python/generate.sh" "$scratch/python"; }
python_same() {
    same "$root/clients/python/runlog_client" "$scratch/python/runlog_client" \
        "clients/python/generate.sh" &&
        same "$root/clients/python/runlog_client_async" "$scratch/python/runlog_client_async" \
            "clients/python/generate.sh"
}
ts_install() { (cd "$root/clients/ts" && npm ci --no-audit --no-fund --loglevel=error); }
ts_generate() {
    mkdir -p "$scratch/ts"
    (cd "$root/clients/ts" && RUNLOG_CODEGEN_DIR="$scratch/ts" \
        npx --no-install graphql-codegen --config codegen.ts --silent)
}
ts_same() {  # graphql.ts, possible-types.json, persisted/ (and its manifest, which the service reads)
    same "$root/clients/ts/src/generated" "$scratch/ts" \
        "(cd clients/ts && npm ci && npm run generate)" &&
        same "$root/gql/operations/persisted-documents.json" "$scratch/ts/persisted/persisted-documents.json" \
            "(cd clients/ts && npm ci && npm run generate)"
}
ts_check() { (cd "$root/clients/ts" && npm run --silent check); }

step "python client: generate (ariadne-codegen, own venv)" python_generate
step "python client: committed = generated" python_same
step "typescript: npm ci" ts_install
step "typescript: generate (graphql-codegen)" ts_generate
step "typescript: committed = generated" ts_same
step "typescript: tsc type-checks src/usage.ts" ts_check

if ((${#failed[@]})); then
    printf 'clients/check.sh: FAILED: %s\n' "$(IFS=';'; echo "${failed[*]}" | sed 's/;/; /g')"
    exit 1
fi
echo "clients/check.sh: both clients are current and the TypeScript usage type-checks"
