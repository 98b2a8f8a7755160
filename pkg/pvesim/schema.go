package pvesim

import (
	"errors"
	"fmt"
	"net/http"
	"sync"

	"github.com/flexplane/flexplane/pkg/pvesim/pveschema"
)

// apiSchema resolves, validates and authorizes requests with Proxmox's own schema.
type apiSchema struct {
	s *pveschema.Schema
}

type apiEndpoint struct {
	*pveschema.Endpoint
}

// sharedSchema parses the embedded schema once per process: it is immutable and safe
// for concurrent use, and every simulated cluster uses the same.
var sharedSchema = sync.OnceValues(pveschema.Load)

func loadSchema() (*apiSchema, error) {
	s, err := sharedSchema()
	if err != nil {
		return nil, fmt.Errorf("load schema: %w", err)
	}
	return &apiSchema{s: s}, nil
}

// lookup answers 501 like Proxmox for an unknown path or method.
func (a *apiSchema) lookup(method, rel string) (*apiEndpoint, map[string]string, *apiError) {
	ep, vars, err := a.s.Lookup(method, rel)
	if err != nil {
		msg := err.Error()
		var ni *pveschema.NotImplementedError
		if errors.As(err, &ni) {
			msg = ni.Error()
		}
		return nil, nil, &apiError{status: http.StatusNotImplemented, msg: msg}
	}
	return &apiEndpoint{ep}, vars, nil
}

// validate answers 400 "Parameter verification failed." with the errors map.
func (e *apiEndpoint) validate(vars map[string]string, raw map[string][]string) (params, *apiError) {
	p, err := e.ValidateRequest(vars, raw)
	if err != nil {
		return nil, badParams(err)
	}
	return params(p), nil
}

// authorize answers 403 "Permission check failed (...)".
func (e *apiEndpoint) authorize(p params, has func(path, priv string) bool) *apiError {
	if err := e.Authorize(pveschema.Params(p), has); err != nil {
		return &apiError{status: http.StatusForbidden, msg: err.Error()}
	}
	return nil
}

// property parses a property-string parameter of this endpoint with its format.
func (e *apiEndpoint) property(param, value string) (params, *apiError) {
	p, err := e.ParseProperty(param, value)
	if err != nil {
		return nil, badParams(err)
	}
	return params(p), nil
}

// badParams turns a pveschema verification error into a 400 with its errors map.
func badParams(err error) *apiError {
	var pe *pveschema.ParamError
	if errors.As(err, &pe) {
		return &apiError{status: http.StatusBadRequest, msg: "Parameter verification failed.", errors: pe.Errors}
	}
	return &apiError{status: http.StatusBadRequest, msg: err.Error()}
}
