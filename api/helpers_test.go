package api_test

// The harness's buyers' token settings.
const (
	testSecret = "test-secret-of-at-least-32-bytes!"
	testIssuer = "seckill-test"
)
