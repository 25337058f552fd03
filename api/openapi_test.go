package api_test

import (
	"context"
	"net/http"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"

	"github.com/seckill/seckill/api"
	"github.com/seckill/seckill/api/apitest"
	"github.com/seckill/seckill/events"
)

// allCodes is every events.Code, listed by hand so that a new code fails this test until
// the spec and ErrorStatusCode know it.
var allCodes = []events.Code{
	events.Invalid,
	events.Unauthorized,
	events.CampaignNotFound,
	events.OrderNotFound,
	events.CampaignExists,
	events.SoldOut,
	events.LimitExceeded,
	events.NotStarted,
	events.Ended,
	events.Unavailable,
	events.Internal,
	events.BodyTooLarge,
	events.UnsupportedMediaType,
	events.RateLimited,
	events.IdempotencyKeyReused,
	events.IdempotencyInProgress,
	events.AlreadyPaid,
	events.PaymentReused,
	events.PaymentWindowClosed,
	events.OrderNotConfirmed,
	events.OrderNotPayable,
	events.CampaignCancelled,
}

// The router's own codes (unexported in api), for paths and methods no operation serves.
const (
	routerNotFound         events.Code = "not_found"
	routerMethodNotAllowed events.Code = "method_not_allowed"
)

func TestOpenAPIIsValid(t *testing.T) {
	doc, err := openapi3.NewLoader().LoadFromData(api.OpenAPI)
	if err != nil {
		t.Fatalf("load: %v", err)
	}
	if err := doc.Validate(context.Background()); err != nil {
		t.Fatalf("validate: %v", err)
	}
	if doc.OpenAPI != "3.0.3" {
		t.Errorf("openapi version %q, want 3.0.3", doc.OpenAPI)
	}
}

var pathParam = regexp.MustCompile(`\{([^/{}]+)\}`)

// TestOpenAPIRoutes keeps the spec's operations and the server's routes the same set.
func TestOpenAPIRoutes(t *testing.T) {
	spec := apitest.LoadSpec(t)
	var documented []string
	for path, item := range spec.Paths.Map() {
		for method := range item.Operations() {
			documented = append(documented, method+" "+pathParam.ReplaceAllString(path, ":$1"))
		}
	}
	// New only wires routes: nil dependencies are fine until a request needs them.
	srv := api.New(api.Config{}, nil, nil, nil)
	var served []string
	for _, r := range srv.Routes() {
		method, _, _ := strings.Cut(r, " ")
		if !standardMethod[method] { // Echo's internal routes, such as echo_route_not_found
			continue
		}
		served = append(served, r)
	}
	slices.Sort(documented)
	slices.Sort(served)
	for _, r := range served {
		if !slices.Contains(documented, r) {
			t.Errorf("route %s is served but not in api/openapi.yaml", r)
		}
	}
	for _, r := range documented {
		if !slices.Contains(served, r) {
			t.Errorf("operation %s is in api/openapi.yaml but not served", r)
		}
	}
	if len(served) == 0 {
		t.Error("the server has no routes")
	}
}

var standardMethod = map[string]bool{
	http.MethodGet: true, http.MethodHead: true, http.MethodPost: true, http.MethodPut: true,
	http.MethodPatch: true, http.MethodDelete: true, http.MethodConnect: true,
	http.MethodOptions: true, http.MethodTrace: true,
}

// errorBody is an error response with code, as the server writes it.
func errorBody(code events.Code) any {
	return map[string]any{"error": map[string]any{"code": string(code), "message": "m"}}
}

// TestOpenAPIErrorCodes keeps the spec's error codes, ErrorStatusCode and events.Code in step:
// the Error enum lists exactly every code; every error response of every operation accepts
// only codes that ErrorStatusCode maps to its status; and every code is documented where it
// can happen.
func TestOpenAPIErrorCodes(t *testing.T) {
	spec := apitest.LoadSpec(t)
	errSchema := spec.Components.Schemas["Error"]
	if errSchema == nil {
		t.Fatal("no Error schema")
	}
	codeSchema := errSchema.Value.Properties["error"].Value.Properties["code"].Value
	var enum []events.Code
	for _, v := range codeSchema.Enum {
		s, ok := v.(string)
		if !ok {
			t.Fatalf("Error code enum holds %v, not a string", v)
		}
		enum = append(enum, events.Code(s))
	}
	want := append(slices.Clone(allCodes), routerNotFound, routerMethodNotAllowed)
	for _, c := range want {
		if !slices.Contains(enum, c) {
			t.Errorf("code %q is missing from the Error schema's enum", c)
		}
	}
	for _, c := range enum {
		if !slices.Contains(want, c) {
			t.Errorf("the Error schema's enum lists %q, which no one returns", c)
		}
	}

	documented := map[int]bool{} // statuses some operation documents
	accepted := map[events.Code]bool{}
	for path, item := range spec.Paths.Map() {
		for method, op := range item.Operations() {
			for key, resp := range op.Responses.Map() {
				status, err := strconv.Atoi(key)
				if err != nil {
					t.Errorf("%s %s documents response %q: want explicit statuses only", method, path, key)
					continue
				}
				documented[status] = true
				if status < 400 {
					continue
				}
				media := resp.Value.Content.Get("application/json")
				if media == nil || media.Schema == nil {
					t.Errorf("%s %s %d has no application/json schema", method, path, status)
					continue
				}
				if path == "/readyz" { // the per-dependency map, not an Error
					continue
				}
				var ok []events.Code
				for _, c := range enum {
					if media.Schema.Value.VisitJSON(errorBody(c)) == nil {
						ok = append(ok, c)
						accepted[c] = true
					}
				}
				if len(ok) == 0 {
					t.Errorf("%s %s %d accepts no error code", method, path, status)
				}
				for _, c := range ok {
					if got := api.ErrorStatusCode(c); got != status {
						t.Errorf("%s %s %d accepts code %q, which ErrorStatusCode maps to %d", method, path, status, c, got)
					}
				}
				if err := media.Schema.Value.VisitJSON(map[string]any{"error": map[string]any{"code": "sold_out"}}); err == nil {
					t.Errorf("%s %s %d accepts an error without a message", method, path, status)
				}
			}
		}
	}

	for _, c := range enum {
		status := api.ErrorStatusCode(c)
		switch c {
		case routerNotFound, routerMethodNotAllowed:
			// The router answers these for paths and methods that no operation has, so no
			// operation's responses list them; contract_test checks the real answers.
			if accepted[c] {
				t.Errorf("an operation documents the router's code %q", c)
			}
			if wantStatus := map[events.Code]int{routerNotFound: 404, routerMethodNotAllowed: 405}[c]; status != wantStatus {
				t.Errorf("ErrorStatusCode(%q) = %d, want %d", c, status, wantStatus)
			}
			continue
		}
		if !documented[status] {
			t.Errorf("code %q maps to %d, which no operation documents", c, status)
		}
		if !accepted[c] {
			t.Errorf("code %q is in no operation's error responses", c)
		}
	}
	for _, c := range allCodes {
		if api.ErrorStatusCode(c) == http.StatusInternalServerError && c != events.Internal {
			t.Errorf("ErrorStatusCode(%q) falls through to 500", c)
		}
	}
}
