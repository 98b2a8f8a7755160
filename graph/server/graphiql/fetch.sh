#!/usr/bin/env bash
# Fetches GraphiQL and the React it runs on from the npm registry (npm pack
# checks each tarball against the registry's integrity hash) into assets/,
# which graph/server/graphiql embeds. Run by `make generate-graphiql`.
set -euo pipefail
cd "$(dirname "$0")"
graphiql=$1 react=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
(cd "$tmp" && npm pack --silent "graphiql@$graphiql" "react@$react" "react-dom@$react" >/dev/null)
for p in graphiql react react-dom; do
	v=$react; [ "$p" = graphiql ] && v=$graphiql
	mkdir -p "$tmp/$p"
	tar -xzf "$tmp/$p-$v.tgz" -C "$tmp/$p"
done
rm -rf assets
mkdir assets
cp "$tmp/graphiql/package/graphiql.min.js" "$tmp/graphiql/package/graphiql.min.css" assets/
cp "$tmp/graphiql/package/LICENSE" assets/LICENSE.graphiql
cp "$tmp/react/package/umd/react.production.min.js" assets/
cp "$tmp/react/package/LICENSE" assets/LICENSE.react
cp "$tmp/react-dom/package/umd/react-dom.production.min.js" assets/
cp "$tmp/react-dom/package/LICENSE" assets/LICENSE.react-dom
