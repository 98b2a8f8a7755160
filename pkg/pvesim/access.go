package pvesim

import (
	"sort"
	"strings"
)

// The simulated cluster's users are the owners of its API tokens; it has no groups and
// the two built-in realms. /access is read-only here: creating or changing users, groups,
// realms, roles or ACLs answers 501.

// realmTypes are the built-in authentication realms with their descriptions.
var realmTypes = []struct{ realm, comment string }{
	{"pam", "Linux PAM standard authentication"},
	{"pve", "Proxmox VE authentication server"},
}

// hAccessDomains lists the authentication realms (anyone may, for the login box).
func hAccessDomains(*call) (any, error) {
	out := make([]map[string]any, 0, len(realmTypes))
	for _, r := range realmTypes {
		out = append(out, map[string]any{"realm": r.realm, "type": r.realm, "comment": r.comment})
	}
	return out, nil
}

// hAccessGroups lists the groups the caller may see: the simulated cluster has none.
func hAccessGroups(*call) (any, error) { return []map[string]any{}, nil }

// hAccessUsers lists the users: all of them for a caller with User.Modify or Sys.Audit on
// /access/groups, otherwise only the caller, as Proxmox restricts the list. full=1 adds
// each user's API tokens.
func hAccessUsers(cl *call) (any, error) {
	self, _, _ := strings.Cut(cl.user, "!")
	all := cl.has == nil || cl.has("/access/groups", "User.Modify") || cl.has("/access/groups", "Sys.Audit")
	tokens := map[string][]string{}
	privsep := map[string]int{}
	for id, t := range cl.c.tokens {
		if t.acl != nil {
			privsep[id] = 1 // a token with full privileges stands for its user
		}
		user, tokenID, _ := strings.Cut(id, "!")
		if all || user == self {
			tokens[user] = append(tokens[user], tokenID)
		}
	}
	full := cl.p.bool("full")
	out := []map[string]any{}
	for _, user := range sortedKeys(tokens) {
		_, realm, _ := strings.Cut(user, "@")
		e := map[string]any{"userid": user, "enable": 1, "expire": 0, "realm-type": realm}
		if full {
			ids := tokens[user]
			sort.Strings(ids)
			list := make([]map[string]any, 0, len(ids))
			for _, id := range ids {
				list = append(list, map[string]any{"tokenid": id, "expire": 0, "privsep": privsep[user+"!"+id]})
			}
			e["tokens"] = list
		}
		out = append(out, e)
	}
	if cl.p.has("enabled") && !cl.p.bool("enabled") {
		out = []map[string]any{} // every simulated user is enabled
	}
	return out, nil
}
