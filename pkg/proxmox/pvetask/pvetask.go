// Package pvetask recognises the answers of Proxmox VE requests that start
// a task. It depends on nothing but the standard library, so both the agent
// and the orchestrator use it.
package pvetask

import (
	"bytes"
	"encoding/json"
	"strings"
)

// UPIDOfAnswer is the UPID of the task a Proxmox answer ({"data":"UPID:..."})
// started, or "" when the answer is not one.
func UPIDOfAnswer(body []byte) string {
	// A task's answer is short; anything long is not one.
	if len(body) > 1024 || !bytes.Contains(body, []byte("UPID:")) {
		return ""
	}
	var env struct {
		Data string `json:"data"`
	}
	if json.Unmarshal(body, &env) != nil || !strings.HasPrefix(env.Data, "UPID:") {
		return ""
	}
	return env.Data
}
