#!/bin/sh
# Keeps the flexplane project in Zitadel: the project (role assertion on),
# the portal's OIDC application, flexctl's native OIDC application (device
# authorization and refresh tokens) and the role keys flexplane reads. It
# only adds what is missing, so running it again (an upgrade that changed
# the VDC list, a retry) changes nothing that exists and rotates nothing.
# It writes the portal's client id (flexplane's oidc.audience) and
# flexctl's (oidc.cliClientId) to a ConfigMap.
#
# Environment: ISSUER, PAT_FILE, PROJECT, APP, CLI_APP (empty: no flexctl
# application), PORTAL_URL, DEV_MODE, ROLES (space separated), CONFIGMAP.
set -eu

api() { # METHOD PATH [BODY]
	curl -fsS --retry 5 --retry-all-errors --retry-delay 2 -X "$1" "$ISSUER$2" \
		-H "Authorization: Bearer $(cat "$PAT_FILE")" -H 'Content-Type: application/json' \
		${3:+--data "$3"}
}

echo "setup: waiting for Zitadel at $ISSUER"
i=0
until curl -fsS -o /dev/null "$ISSUER/debug/ready"; do
	i=$((i + 1))
	if [ "$i" -gt 150 ]; then echo "setup: Zitadel is not ready" >&2; exit 1; fi
	sleep 2
done
if [ ! -s "$PAT_FILE" ]; then
	echo "setup: no token in $PAT_FILE: the init job stores it when Zitadel creates its first instance" >&2
	exit 1
fi

byname() { jq -nc --arg n "$1" '{queries: [{nameQuery: {name: $n, method: "TEXT_QUERY_METHOD_EQUALS"}}]}'; }

project=$(api POST /management/v1/projects/_search "$(byname "$PROJECT")" | jq -r '.result[0].id // empty')
if [ -z "$project" ]; then
	project=$(api POST /management/v1/projects \
		"$(jq -nc --arg n "$PROJECT" '{name: $n, projectRoleAssertion: true, projectRoleCheck: false}')" | jq -r .id)
	echo "setup: created project $PROJECT ($project)"
else
	echo "setup: project $PROJECT exists ($project)"
fi

# oidcapp NAME BODY: the client id of the project's OIDC application NAME,
# made with BODY (JSON without the name) if it does not exist.
oidcapp() {
	id=$(api POST "/management/v1/projects/$project/apps/_search" "$(byname "$1")" | jq -r '.result[0].oidcConfig.clientId // empty')
	if [ -n "$id" ]; then
		echo "setup: OIDC application $1 exists ($id)" >&2
	else
		id=$(api POST "/management/v1/projects/$project/apps/oidc" "$(printf '%s' "$2" | jq -c --arg n "$1" '. + {name: $n}')" | jq -r .clientId)
		echo "setup: created OIDC application $1 ($id)" >&2
	fi
	printf '%s' "$id"
}

client=$(oidcapp "$APP" "$(jq -nc --arg u "${PORTAL_URL%/}" --argjson dev "$DEV_MODE" '{
		redirectUris: [($u + "/auth/callback")],
		postLogoutRedirectUris: [($u + "/")],
		responseTypes: ["OIDC_RESPONSE_TYPE_CODE"],
		grantTypes: ["OIDC_GRANT_TYPE_AUTHORIZATION_CODE", "OIDC_GRANT_TYPE_REFRESH_TOKEN"],
		appType: "OIDC_APP_TYPE_USER_AGENT",
		authMethodType: "OIDC_AUTH_METHOD_TYPE_NONE",
		accessTokenType: "OIDC_TOKEN_TYPE_JWT",
		accessTokenRoleAssertion: true,
		idTokenRoleAssertion: true,
		idTokenUserinfoAssertion: true,
		devMode: $dev}')")

# flexctl signs in by the device authorization grant (RFC 8628) and keeps
# a refresh token: a native public client without redirects. Its tokens
# carry the project's roles as the portal's do.
cli=""
if [ -n "$CLI_APP" ]; then
	cli=$(oidcapp "$CLI_APP" "$(jq -nc '{
		responseTypes: ["OIDC_RESPONSE_TYPE_CODE"],
		grantTypes: ["OIDC_GRANT_TYPE_DEVICE_CODE", "OIDC_GRANT_TYPE_REFRESH_TOKEN"],
		appType: "OIDC_APP_TYPE_NATIVE",
		authMethodType: "OIDC_AUTH_METHOD_TYPE_NONE",
		accessTokenType: "OIDC_TOKEN_TYPE_JWT",
		accessTokenRoleAssertion: true,
		idTokenRoleAssertion: true,
		idTokenUserinfoAssertion: true}')")
fi

existing=$(api POST "/management/v1/projects/$project/roles/_search" '{}' | jq -r '.result[]?.key')
for role in $ROLES; do
	if printf '%s\n' "$existing" | grep -qxF "$role"; then
		continue
	fi
	api POST "/management/v1/projects/$project/roles" "$(jq -nc --arg k "$role" '{roleKey: $k, displayName: $k}')" >/dev/null
	echo "setup: added role $role"
done

kubectl patch configmap "$CONFIGMAP" --type merge \
	-p "$(jq -nc --arg c "$client" --arg l "$cli" --arg p "$project" --arg i "$ISSUER" '{data: {clientId: $c, cliClientId: $l, projectId: $p, issuer: $i}}')"
echo "setup: done; flexplane's oidc.audience is $client, its oidc.cliClientId ${cli:-empty}"
