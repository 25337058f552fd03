package api

import "testing"

// TestCutBearer: the scheme's name is case-insensitive, and one or more spaces end it (RFC 9110
// §11.4: auth-scheme 1*SP token68). A token of spaces alone, or none, is no token.
func TestCutBearer(t *testing.T) {
	for auth, want := range map[string]string{
		"Bearer abc":   "abc",
		"bearer abc":   "abc",
		"BEARER abc":   "abc",
		"Bearer  abc":  "abc",
		"Bearer   a.b": "a.b",
		"Bearer ":      "",
		"Bearer   ":    "",
		"Bearer":       "",
		"Basic abc":    "",
		"Bearerabc":    "",
		"":             "",
	} {
		got, ok := cutBearer(auth)
		if got != want || ok != (want != "") {
			t.Errorf("cutBearer(%q) = %q, %v; want %q, %v", auth, got, ok, want, want != "")
		}
	}
}
