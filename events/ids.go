package events

import (
	"crypto/rand"
	"encoding/base32"
	"encoding/binary"
	"strings"
	"time"
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
