package events

import (
	"crypto/rand"
	"encoding/base32"
	"encoding/binary"
	"regexp"
	"strings"
	"time"
)

// campaignIDPattern keeps campaign ids safe in URLs, Redis keys and order ids: no '.', which
// separates the campaign from the rest of an order id.
var campaignIDPattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$`)

// ValidCampaignID reports whether id may name a campaign.
func ValidCampaignID(id string) bool { return campaignIDPattern.MatchString(id) }

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
	for _, r := range rest {
		if !(r >= '0' && r <= '9' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r == '-' || r == '_') {
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
