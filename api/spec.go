package api

import _ "embed"

// OpenAPI is api/openapi.yaml, the OpenAPI 3.0 description of every route New registers.
//
//go:embed openapi.yaml
var OpenAPI []byte
