// Package api is seckill's HTTP front: Echo handlers for campaigns, purchases and orders, the
// orders' event streams, the admin endpoints and the operator console (api/console, embedded),
// health and metrics. A purchase runs the reserve script once and produces
// OrderRequested, and touches the store only if the produce fails. api/openapi.yaml documents
// the contract, and a test keeps it and the routes in step.
package api
