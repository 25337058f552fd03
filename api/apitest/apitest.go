// Package apitest checks HTTP exchanges with the api against its OpenAPI description,
// api/openapi.yaml, so that any test that talks to the api also tests the contract.
//
// Load the spec once with LoadSpec, then either check each exchange with Check, serve
// in-process requests with Serve, or give an http.Client the RoundTripper of Transport
// to check everything it sends.
//
// The rules: the response must match the operation's documented response for its status
// (an undocumented status is an error); a request the spec calls invalid must be refused
// with a 4xx; a request to a path or a method the spec does not describe must get the
// router's 404 or 405 with an Error body. Security requirements are checked for the presence
// of the credentials only (a bearer Authorization header, or the API key's header): a request
// without them breaks the spec and must be refused with a 4xx. Whether a token is right is the
// server's business, and the 401s are documented responses.
package apitest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"github.com/getkin/kin-openapi/routers/gorillamux"

	"github.com/seckill/seckill/api"
)

// LoadSpec parses and validates api.OpenAPI, failing the test if it is not a valid
// OpenAPI 3.0 document.
func LoadSpec(tb testing.TB) *openapi3.T {
	tb.Helper()
	doc, err := openapi3.NewLoader().LoadFromData(api.OpenAPI)
	if err != nil {
		tb.Fatalf("apitest: load api/openapi.yaml: %v", err)
	}
	if err := doc.Validate(context.Background()); err != nil {
		tb.Fatalf("apitest: api/openapi.yaml is not valid OpenAPI: %v", err)
	}
	return doc
}

// routerCache holds one router per spec: building one compiles every path.
var routerCache sync.Map // *openapi3.T → routers.Router

func routerOf(spec *openapi3.T) (routers.Router, error) {
	if r, ok := routerCache.Load(spec); ok {
		return r.(routers.Router), nil
	}
	r, err := gorillamux.NewRouter(spec)
	if err != nil {
		return nil, err
	}
	routerCache.Store(spec, r)
	return r, nil
}

func init() {
	// The order event stream is text; Check validates its body as a string.
	openapi3filter.RegisterBodyDecoder("text/event-stream", openapi3filter.PlainBodyDecoder)
}

// credentialsPresent passes a security scheme when the request carries its credentials.
func credentialsPresent(_ context.Context, in *openapi3filter.AuthenticationInput) error {
	h := in.RequestValidationInput.Request.Header
	scheme := in.SecurityScheme
	switch {
	case scheme.Type == "http" && strings.EqualFold(scheme.Scheme, "bearer"):
		if auth := h.Get("Authorization"); len(auth) > len("bearer ") && strings.EqualFold(auth[:len("bearer ")], "bearer ") {
			return nil
		}
		return errors.New("no bearer Authorization header")
	case scheme.Type == "apiKey" && scheme.In == "header":
		if h.Get(scheme.Name) != "" {
			return nil
		}
		return fmt.Errorf("no %s header", scheme.Name)
	}
	return fmt.Errorf("apitest cannot check security scheme %s %s", scheme.Type, scheme.Scheme)
}

var options = &openapi3filter.Options{
	AuthenticationFunc:    credentialsPresent,
	IncludeResponseStatus: true,
	MultiError:            true,
}

// Check reports through tb.Errorf every way in which the exchange of req and the response
// (status, header, body) breaks the spec. It reads req's body through req.GetBody, which
// http.NewRequest sets for in-memory bodies (Serve and Transport set it themselves); a
// request with a body but no GetBody is reported, since its body has been read already.
// Check never calls tb.Fatal, so it may run on any goroutine.
func Check(tb testing.TB, spec *openapi3.T, req *http.Request, status int, header http.Header, body []byte) {
	tb.Helper()
	what := fmt.Sprintf("%s %s → %d", req.Method, req.URL.RequestURI(), status)
	reqBody, err := requestBody(req)
	if err != nil {
		tb.Errorf("apitest: %s: %v", what, err)
		return
	}
	router, err := routerOf(spec)
	if err != nil {
		tb.Errorf("apitest: router of the spec: %v", err)
		return
	}
	r := req.Clone(context.Background())
	r.Body = io.NopCloser(bytes.NewReader(reqBody))
	route, params, err := router.FindRoute(r)
	switch {
	case errors.Is(err, routers.ErrPathNotFound):
		checkRouterError(tb, spec, what, http.StatusNotFound, status, body)
		return
	case errors.Is(err, routers.ErrMethodNotAllowed):
		checkRouterError(tb, spec, what, http.StatusMethodNotAllowed, status, body)
		return
	case err != nil:
		tb.Errorf("apitest: %s: find the route: %v", what, err)
		return
	}
	in := &openapi3filter.RequestValidationInput{Request: r, PathParams: params, Route: route, Options: options}
	if err := openapi3filter.ValidateRequest(context.Background(), in); err != nil && (status < 400 || status > 499) {
		tb.Errorf("apitest: %s: the request breaks the spec, yet the server did not refuse it with a 4xx:\n%v", what, err)
	}
	out := &openapi3filter.ResponseValidationInput{RequestValidationInput: in, Status: status, Header: header, Options: options}
	out.SetBodyBytes(body)
	if err := openapi3filter.ValidateResponse(context.Background(), out); err != nil {
		tb.Errorf("apitest: %s: the response breaks the spec:\n%v\nbody: %s", what, err, body)
	}
}

func requestBody(req *http.Request) ([]byte, error) {
	if req.GetBody == nil {
		if req.Body != nil && req.Body != http.NoBody && req.ContentLength != 0 {
			return nil, errors.New("the request has a body but no GetBody to read it again: build it with http.NewRequest, or use Serve or Transport")
		}
		return nil, nil
	}
	rc, err := req.GetBody()
	if err != nil {
		return nil, fmt.Errorf("read the request body: %w", err)
	}
	defer rc.Close()
	b, err := io.ReadAll(rc)
	if err != nil {
		return nil, fmt.Errorf("read the request body: %w", err)
	}
	return b, nil
}

// checkRouterError checks the answer to a request the spec has no operation for: the
// router's status, with a body of the Error schema.
func checkRouterError(tb testing.TB, spec *openapi3.T, what string, want, status int, body []byte) {
	tb.Helper()
	if status != want {
		tb.Errorf("apitest: %s: the spec has no such operation, so the answer must be the router's %d", what, want)
		return
	}
	ref := spec.Components.Schemas["Error"]
	if ref == nil || ref.Value == nil {
		tb.Errorf("apitest: the spec has no Error schema")
		return
	}
	var v any
	if err := json.Unmarshal(body, &v); err != nil {
		tb.Errorf("apitest: %s: the body is not JSON: %v\nbody: %s", what, err, body)
		return
	}
	if err := ref.Value.VisitJSON(v, openapi3.MultiErrors()); err != nil {
		tb.Errorf("apitest: %s: the body is not an Error:\n%v\nbody: %s", what, err, body)
	}
}

// withGetBody reads req's body once and makes it readable again through GetBody.
func withGetBody(req *http.Request) (*http.Request, error) {
	if req.Body == nil || req.Body == http.NoBody || req.GetBody != nil {
		return req, nil
	}
	b, err := io.ReadAll(req.Body)
	req.Body.Close()
	if err != nil {
		return nil, fmt.Errorf("read the request body: %w", err)
	}
	r := req.Clone(req.Context())
	r.Body = io.NopCloser(bytes.NewReader(b))
	r.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(b)), nil }
	return r, nil
}

// Serve serves req with h in-process, checks the exchange with Check and returns the
// recorded response. req may come from httptest.NewRequest.
func Serve(tb testing.TB, spec *openapi3.T, h http.Handler, req *http.Request) *httptest.ResponseRecorder {
	tb.Helper()
	req, err := withGetBody(req)
	if err != nil {
		tb.Fatalf("apitest: %v", err)
	}
	sent := req.Clone(req.Context())
	if req.GetBody != nil {
		if sent.Body, err = req.GetBody(); err != nil {
			tb.Fatalf("apitest: %v", err)
		}
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, sent)
	Check(tb, spec, req, rec.Code, rec.Header(), rec.Body.Bytes())
	return rec
}

// Transport returns a RoundTripper that sends requests through base
// (http.DefaultTransport when nil) and checks every exchange with Check. The response
// body the caller reads is the one checked. Failures are reported with tb.Errorf, so the
// client may be used from any goroutine while the test runs.
func Transport(tb testing.TB, spec *openapi3.T, base http.RoundTripper) http.RoundTripper {
	if base == nil {
		base = http.DefaultTransport
	}
	return &transport{tb: tb, spec: spec, base: base}
}

type transport struct {
	tb   testing.TB
	spec *openapi3.T
	base http.RoundTripper
}

func (t *transport) RoundTrip(req *http.Request) (*http.Response, error) {
	req, err := withGetBody(req)
	if err != nil {
		return nil, fmt.Errorf("apitest: %w", err)
	}
	sent := req.Clone(req.Context())
	if req.GetBody != nil {
		if req.Body != nil {
			req.Body.Close() // a RoundTripper closes the body it was given
		}
		if sent.Body, err = req.GetBody(); err != nil {
			return nil, fmt.Errorf("apitest: %w", err)
		}
	}
	resp, err := t.base.RoundTrip(sent)
	if err != nil {
		return nil, err
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		return nil, fmt.Errorf("apitest: read the response body: %w", err)
	}
	resp.Body = io.NopCloser(bytes.NewReader(body))
	Check(t.tb, t.spec, req, resp.StatusCode, resp.Header, body)
	return resp, nil
}
