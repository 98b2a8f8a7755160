#!/bin/sh
# Stores the token Zitadel wrote when it created its first instance into
# the Secret SECRET, once: Zitadel writes it only then, and a Secret that
# already holds a token is left alone (an upgrade never rotates it).
set -eu
if [ ! -s /machinekey/pat ]; then
	echo "store-pat: Zitadel wrote no token (its first instance existed already); $SECRET is left as it is"
	exit 0
fi
current=$(kubectl get secret "$SECRET" -o jsonpath='{.data.pat}')
if [ -n "$current" ]; then
	echo "store-pat: $SECRET holds a token already; left as it is"
	exit 0
fi
kubectl patch secret "$SECRET" --type merge -p "{\"data\":{\"pat\":\"$(base64 -w0 </machinekey/pat)\"}}"
echo "store-pat: stored the setup token in $SECRET"
