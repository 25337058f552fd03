package events

import (
	"crypto/rand"
	"encoding/base32"
	"encoding/binary"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"
)

// ValidCampaignID reports whether id may name a campaign: 1 to 64 letters, digits, '-' and '_',
// starting with a letter or a digit (^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$). That keeps campaign ids
// safe in URLs, Redis keys and order ids, where '.' separates the campaign from the rest. A loop,
// not a regexp: every purchase and every consumed event checks one.
func ValidCampaignID(id string) bool {
	if len(id) == 0 || len(id) > 64 || id[0] == '-' || id[0] == '_' {
		return false
	}
	for i := 0; i < len(id); i++ {
		if !idByte(id[i]) {
			return false
		}
	}
	return true
}

// MaxUserLen bounds a user id, in characters: it travels in every event and reservation record.
const MaxUserLen = 128

// ValidUser reports whether id may name a buyer: 1 to MaxUserLen characters of valid UTF-8, none
// of them a control, format (bidi overrides, zero-width characters), private-use or replacement
// character. Two ids that print alike must not be two buyers, nor one id be two: "a\xffb"
// decodes to "a\ufffdb", so the replacement character is refused too. The api admits buyers by
// it and Validate holds every event to it, so an id the store cannot take (PostgreSQL's text
// refuses a NUL byte) is poison at the consumer, not a batch retried forever.
func ValidUser(id string) bool {
	// Most ids are printable ASCII, where the controls are the only class to refuse: a byte at a
	// time they cost 10 ns, the classes' lookup 420 to 960 ns (a 19-byte id, alternating
	// rounds), paid once per purchase and, through Validate, once per consumed event.
	for i := 0; i < len(id); i++ {
		if c := id[i]; c < 0x20 || c >= 0x7f {
			return validUser(id)
		}
	}
	return id != "" && len(id) <= MaxUserLen
}

// validUser is ValidUser for any id.
func validUser(id string) bool {
	if id == "" || utf8.RuneCountInString(id) > MaxUserLen || !utf8.ValidString(id) {
		return false
	}
	return !strings.ContainsFunc(id, func(r rune) bool {
		return r == utf8.RuneError || unicode.In(r, unicode.Cc, unicode.Cf, unicode.Co, unicode.Cs)
	})
}

func idByte(c byte) bool {
	return c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c == '-' || c == '_'
}

var idEncoding = base32.NewEncoding("0123456789abcdefghjkmnpqrstvwxyz").WithPadding(base32.NoPadding)

// NewID returns a random, time-ordered id: 48 bits of milliseconds and 80 random bits, in
// lowercase Crockford base32 (26 characters).
func NewID() string {
	var b [16]byte
	binary.BigEndian.PutUint64(b[:8], uint64(time.Now().UnixMilli())<<16)
	if _, err := rand.Read(b[6:]); err != nil {
		panic(err) // crypto/rand never fails on supported platforms
	}
	return idEncoding.EncodeToString(b[:])
}

// NewOrderID returns a new order id in campaign. The campaign is part of the id so that a pending
// order, which lives only in its campaign's Redis keys until the consumer stores it, can be found
// from its id alone.
func NewOrderID(campaign string) string { return campaign + "." + NewID() }

// CampaignOf returns the campaign an order id belongs to.
func CampaignOf(orderID string) (string, bool) {
	c, rest, ok := strings.Cut(orderID, ".")
	if !ok || rest == "" || len(rest) > 64 || !ValidCampaignID(c) {
		return "", false
	}
	for i := 0; i < len(rest); i++ {
		if !idByte(rest[i]) {
			return "", false
		}
	}
	return c, true
}

// IDTime returns the time embedded in an id from NewID or NewOrderID, and false if id is not one.
func IDTime(id string) (time.Time, bool) {
	if i := strings.LastIndexByte(id, '.'); i >= 0 {
		id = id[i+1:]
	}
	b, err := idEncoding.DecodeString(id)
	if err != nil || len(b) != 16 {
		return time.Time{}, false
	}
	return time.UnixMilli(int64(binary.BigEndian.Uint64(b[:8]) >> 16)), true
}
